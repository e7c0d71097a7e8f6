/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/cred.h>; every kernel type is already in vmlinux.h. */
#pragma once
