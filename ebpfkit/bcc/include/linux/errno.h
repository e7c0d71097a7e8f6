/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: <linux/errno.h> without the system's <asm/errno.h>, which a BPF target does not
 * find: the error numbers BPF programs return or compare (Linux's, the same on every
 * architecture ebpfkit builds for), and libbpf's <bpf/usdt.bpf.h> uses. */
#pragma once
#define EPERM 1
#define ENOENT 2
#define ESRCH 3
#define EINTR 4
#define EIO 5
#define ENXIO 6
#define E2BIG 7
#define EBADF 9
#define EAGAIN 11
#define ENOMEM 12
#define EACCES 13
#define EFAULT 14
#define EBUSY 16
#define EEXIST 17
#define ENODEV 19
#define ENOTDIR 20
#define EISDIR 21
#define EINVAL 22
#define ENFILE 23
#define EMFILE 24
#define ENOSPC 28
#define ESPIPE 29
#define EROFS 30
#define EPIPE 32
#define ERANGE 34
#define ENOSYS 38
#define ENOTSUP 95
#define EOPNOTSUPP 95
#define EADDRINUSE 98
#define ECONNRESET 104
#define ENOTCONN 107
#define ETIMEDOUT 110
#define ECONNREFUSED 111
#define EINPROGRESS 115
