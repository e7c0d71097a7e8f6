/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <net/sock.h>; every kernel type is already in vmlinux.h. */
#pragma once
#define AF_INET 2
#define AF_INET6 10
