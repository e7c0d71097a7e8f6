/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/blkdev.h>; every kernel type is already in vmlinux.h. */
#pragma once
#include <linux/blk_types.h>
#define DISK_NAME_LEN 32
