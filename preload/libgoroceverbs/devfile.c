//go:build linux && cgo && ibverbs

// The devices' character files. Some programs check that a device's
// /dev/infiniband/<dev_name> is a character device they may read and write
// before they use it (UCX does: a device whose file is missing is left out of
// its transports). A soft device has no such file, so stat and access answer
// for the devices the library lists as if it were there: a character device
// of the uverbs major (231), mode 0666. Every other path goes to the kernel
// (fstatat and faccessat, which the library does not define).

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))
#define DEV_DIR "/dev/infiniband/"

// dev_file returns 1 + the index of the device whose file path names, or 0.
static int dev_file(const char *path)
{
	// <sys/stat.h> declares stat's and access's path nonnull, which would
	// let the compiler drop the NULL check below: a program's NULL must
	// reach the kernel (EFAULT), not crash here.
	__asm__("" : "+r"(path));
	if (!path || strncmp(path, DEV_DIR, sizeof DEV_DIR - 1) != 0)
		return 0;
	return gr_dev_file((char *)path + sizeof DEV_DIR - 1);
}

static void fake_stat(int n, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = makedev(231, 192 + n - 1);
	st->st_nlink = 1;
	st->st_blksize = 4096;
}

EXPORT int stat(const char *path, struct stat *st)
{
	int n = dev_file(path);
	if (n && st) {
		fake_stat(n, st);
		return 0;
	}
	return fstatat(AT_FDCWD, path, st, 0);
}

EXPORT int stat64(const char *path, struct stat64 *st)
{
	return stat(path, (struct stat *)st); // one structure on 64-bit Linux
}

// __xstat is stat for programs built against glibc before 2.33.
EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	return stat(path, st);
}

EXPORT int __xstat64(int ver, const char *path, struct stat64 *st)
{
	return stat(path, (struct stat *)st);
}

EXPORT int access(const char *path, int mode)
{
	if (dev_file(path))
		return 0;
	return faccessat(AT_FDCWD, path, mode, 0);
}
