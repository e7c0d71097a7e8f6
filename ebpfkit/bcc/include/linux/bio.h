/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/bio.h>; every kernel type is already in vmlinux.h. */
#pragma once
#include <linux/blk_types.h>
