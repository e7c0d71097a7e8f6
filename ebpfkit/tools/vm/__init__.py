"""vm: boot another kernel under QEMU and run a command or tests inside (the harness is ebpfkit.vm)."""
