/* SPDX-License-Identifier: Apache-2.0 */
/* ebpfkit.bcc: BCC programs include <linux/fs.h>; every kernel type is already in vmlinux.h. */
#pragma once
#define NAME_MAX 255
#define PATH_MAX 4096
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define FMODE_EXEC 0x20
#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFDIR 0040000
#define S_ISREG(m) (((m) & S_IFMT) == S_IFREG)
#define S_ISDIR(m) (((m) & S_IFMT) == S_IFDIR)
