/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <uapi/linux/limits.h>; every kernel type is already in vmlinux.h. */
#pragma once
#define NAME_MAX 255
#define PATH_MAX 4096
