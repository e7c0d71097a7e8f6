/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/sched.h>; every kernel type is already in vmlinux.h. */
#pragma once
#ifndef TASK_COMM_LEN
#define TASK_COMM_LEN 16
#endif
/* task states (BTF has no #defines) */
#define TASK_RUNNING 0x0000
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
