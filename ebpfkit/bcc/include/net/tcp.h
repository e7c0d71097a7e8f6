/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <net/tcp.h>; every kernel type is already in vmlinux.h. */
#pragma once
#include <net/inet_sock.h>
