"""BCC compatibility: tools and programs written for BCC, on ebpfkit (issue #23). For now,
whether BCC itself is there to compare against or to run such programs with."""
