/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <net/inet_connection_sock.h>; every kernel type is already in vmlinux.h. */
#pragma once
