"""bcc: run BCC's own tools and scripts on ebpfkit.bcc (the kernel's BTF, no kernel headers)."""
