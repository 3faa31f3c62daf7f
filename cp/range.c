// SPDX-License-Identifier: MIT
/* ringrdma-cp ranges: the layout, a declared range's checks, the folded
 * checksum, and the receiver's calls on a partial (cp/range.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "range.h"
#include "xxh.h"

uint64_t cp_stripe_for(uint64_t size, uint64_t stripe, uint32_t chunk)
{
	uint64_t min;

	if (!stripe || !chunk || size <= stripe)
		return 0;
	/* Whole chunks: no chunk straddles two ranges. */
	if (stripe % chunk)
		stripe += chunk - stripe % chunk;
	min = size / CP_RANGES_MAX + (size % CP_RANGES_MAX != 0);
	if (stripe < min)
		stripe = (min + chunk - 1) / chunk * chunk;
	return size > stripe ? stripe : 0;
}

uint32_t cp_range_count(uint64_t size, uint64_t stripe)
{
	return (uint32_t)(size / stripe + (size % stripe != 0));
}

void cp_range_at(uint64_t size, uint64_t stripe, uint32_t i, uint64_t *off, uint64_t *len)
{
	*off = (uint64_t)i * stripe;
	*len = size - *off < stripe ? size - *off : stripe;
}

static int refuse(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return -ERANGE;
}

int cp_range_check(uint64_t size, uint64_t off, uint64_t len, uint32_t chunk, char *why,
		   size_t why_len)
{
	if (!len)
		return refuse(why, why_len, "an empty range at %llu", (unsigned long long)off);
	if (off >= size || len > size - off)
		return refuse(why, why_len, "range %llu+%llu past the declared size %llu",
			      (unsigned long long)off, (unsigned long long)len,
			      (unsigned long long)size);
	if (!chunk || off % chunk || (off + len != size && len % chunk))
		return refuse(why, why_len, "range %llu+%llu not on chunks of %u",
			      (unsigned long long)off, (unsigned long long)len, chunk);
	return 0;
}

uint64_t cp_range_held(uint64_t off, uint64_t len, uint64_t hole, uint32_t chunk)
{
	uint64_t held;

	if (hole <= off || !chunk)
		return 0;
	held = hole - off;
	if (held >= len)
		return len;
	return held - held % chunk;
}

int cp_range_fold_init(struct cp_range_fold *f)
{
	f->n = 0;
	f->st = cp_xxh()->create();
	return f->st ? 0 : -ENOMEM;
}

void cp_range_fold_add(struct cp_range_fold *f, uint64_t range_sum)
{
	uint8_t le[8];

	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(range_sum >> (8 * i));
	cp_xxh()->update(f->st, le, sizeof(le));
	f->n++;
}

uint64_t cp_range_fold_sum(const struct cp_range_fold *f)
{
	return cp_xxh()->digest(f->st);
}

void cp_range_fold_free(struct cp_range_fold *f)
{
	if (f->st)
		cp_xxh()->destroy(f->st);
	f->st = NULL;
}

static int ofd_lock(int fd, short type, uint64_t off, uint64_t len)
{
	struct flock fl = {
		.l_type = type,
		.l_whence = SEEK_SET,
		.l_start = (off_t)off,
		.l_len = (off_t)len,
	};

	if (!len || off > INT64_MAX || len - 1 > INT64_MAX - off)
		return -EOVERFLOW;
	if (!fcntl(fd, F_OFD_SETLK, &fl))
		return 0;
	return errno == EAGAIN || errno == EACCES ? -EBUSY : -errno;
}

int cp_range_hold(int fd, bool alone)
{
	return ofd_lock(fd, alone ? F_WRLCK : F_RDLCK, CP_RANGE_HOLD_OFF, 1);
}

/* A range's bytes: never the hold's. */
static int range_lock(int fd, short type, uint64_t off, uint64_t len)
{
	if (!len)
		return -EINVAL;
	if (off >= CP_RANGE_HOLD_OFF || len > CP_RANGE_HOLD_OFF - off)
		return -EOVERFLOW;
	return ofd_lock(fd, type, off, len);
}

int cp_range_claim(int fd, uint64_t off, uint64_t len)
{
	return range_lock(fd, F_WRLCK, off, len);
}

int cp_range_unclaim(int fd, uint64_t off, uint64_t len)
{
	return range_lock(fd, F_UNLCK, off, len);
}

int cp_range_still_partial(int fd, int dirfd, const char *part)
{
	struct stat a, b;

	if (fstat(fd, &a))
		return -errno;
	if (fstatat(dirfd, part, &b, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? -ESTALE : -errno;
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino || a.st_nlink != 1)
		return -ESTALE;
	return 0;
}

int cp_range_have(int fd, uint64_t off, uint64_t len, uint32_t chunk, uint64_t *held)
{
	off_t data, hole;

	*held = 0;
	if (off > INT64_MAX)
		return -EOVERFLOW;
	data = lseek(fd, (off_t)off, SEEK_DATA);
	if (data < 0)
		return errno == ENXIO ? 0 : -errno; /* nothing at or after @off */
	if ((uint64_t)data != off)
		return 0; /* a hole where the range begins */
	hole = lseek(fd, (off_t)off, SEEK_HOLE);
	if (hole < 0)
		return -errno;
	*held = cp_range_held(off, len, (uint64_t)hole, chunk);
	return 0;
}

/* Queue range @v->next; its digest is taken once the hasher caught up. */
static int verify_queue(struct cp_range_verify *v)
{
	uint64_t off, len;
	int64_t rc;

	cp_range_at(v->size, v->stripe, v->next, &off, &len);
	rc = cp_hasher_add_fd(v->h, v->fd, off, len);
	if (rc < 0)
		return (int)rc;
	v->next++;
	return 0;
}

int cp_range_verify_start(struct cp_range_verify *v, struct cp_hasher *h, int fd, uint64_t size,
			  uint64_t stripe)
{
	int rc;

	if (!stripe || !size)
		return -EINVAL;
	v->h = h;
	v->fd = fd;
	v->size = size;
	v->stripe = stripe;
	v->next = 0;
	v->n = cp_range_count(size, stripe);
	rc = cp_range_fold_init(&v->fold);
	if (rc)
		return rc;
	cp_hasher_reset(h);
	rc = verify_queue(v);
	if (rc)
		cp_range_fold_free(&v->fold);
	return rc;
}

int cp_range_verify_step(struct cp_range_verify *v, uint64_t *sum)
{
	int err;

	if (!cp_hasher_caught_up(v->h))
		return 1;
	err = cp_hasher_error(v->h);
	if (!err) {
		/* Range next - 1 is read whole: its own sum, folded in order. */
		cp_range_fold_add(&v->fold, cp_hasher_digest(v->h));
		if (v->next < v->n) {
			cp_hasher_reset(v->h);
			err = verify_queue(v);
			if (!err)
				return 1;
		}
	}
	if (!err)
		*sum = cp_range_fold_sum(&v->fold);
	cp_range_fold_free(&v->fold);
	return err;
}

void cp_range_verify_cancel(struct cp_range_verify *v)
{
	cp_range_fold_free(&v->fold);
}
