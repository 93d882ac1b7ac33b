#!/usr/bin/python3
"""The page cache's state of a file, independently of dspark (tests/cli/test_huge_pages.sh).

    page_cache.py probe DIR     exit 0 if this kernel and DIR's file system cache a file read through
                                a mapping advised MADV_HUGEPAGE in huge pages (a fresh 16 MiB file,
                                dropped from the cache, then mapped and read), 1 if not; prints the share
    page_cache.py small FILE... leave FILE's cached pages small, as a file just written or downloaded
                                often is: drop them, then read the file back 4 KiB at a time with
                                readahead off (each read caches one small page)
    page_cache.py share FILE    print the share of FILE's pages that a plain mapping maps huge
                                (/proc/self/smaps: FilePmdMapped / Rss) after reading every page
"""
import mmap, os, sys

PAGE = 4096

def drop(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # (only clean pages are dropped)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # (those nobody maps)
    os.close(fd)

def mapped_share(path, advise):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        if advise:
            m.madvise(mmap.MADV_HUGEPAGE)
        s = 0
        for off in range(0, size, PAGE):
            s += m[off]
        name = os.path.realpath(path)
        rss = pmd = 0
        cur = False
        with open("/proc/self/smaps") as sm:
            for line in sm:
                parts = line.split()
                if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:  # a mapping's header
                    cur = len(parts) >= 6 and parts[5] == name
                elif cur and parts[0] == "Rss:":
                    rss += int(parts[1])
                elif cur and parts[0] == "FilePmdMapped:":
                    pmd += int(parts[1])
        m.close()
    return pmd / rss if rss else 0.0

def small(path):
    drop(path)
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    size = os.path.getsize(path)
    for off in range(0, size, PAGE):
        os.pread(fd, 1, off)
    os.close(fd)

cmd = sys.argv[1]
if cmd == "probe":
    path = os.path.join(sys.argv[2], "probe.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(16 << 20))
        f.flush()
        os.fsync(f.fileno())
    drop(path)
    share = mapped_share(path, True)
    os.unlink(path)
    print(f"{share:.2f}")
    sys.exit(0 if share >= 0.5 else 1)
elif cmd == "small":
    for p in sys.argv[2:]:
        small(p)
elif cmd == "share":
    print(f"{mapped_share(sys.argv[2], False):.2f}")
