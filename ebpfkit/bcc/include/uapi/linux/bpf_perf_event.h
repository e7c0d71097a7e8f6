/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <uapi/linux/bpf_perf_event.h>; every kernel type is already in vmlinux.h. */
#pragma once
