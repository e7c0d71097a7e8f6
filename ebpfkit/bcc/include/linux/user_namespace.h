/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/user_namespace.h>; every kernel type is already in vmlinux.h. */
#pragma once
