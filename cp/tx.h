/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp: one sending connection. It moves a sequence of sources
 * (files read at an offset, or a socket read until EOF) to a receiver,
 * reading with io_uring straight into registered buffers and writing each
 * chunk with RDMA WRITE with immediate into the slots the receiver granted.
 */
#ifndef CP_TX_H
#define CP_TX_H

#include "cp.h"
#include "loop.h"

struct tx;

struct tx_src {
	int fd;
	bool stream;   /* a socket: read until EOF, size unknown */
	uint64_t size; /* a file: exactly this many bytes */
	char name[CP_NAME_MAX + 1];
	const char *label; /* for messages */
	/* A file's mode and mtime go with it when @meta is set. */
	bool meta;
	uint32_t mode; /* permission bits */
	struct cp_time mtime;
	/* 0: a file or stream; CP_MKDIR, CP_SYMLINK, CP_DIR_META: a tree
	 * entry, sent once the last FILE_DONE came and answered like a file. */
	uint8_t kind;
	char target[CP_TARGET_MAX + 1]; /* CP_SYMLINK */
	/* A range of a striped file: @size is the whole file's, and the
	 * range_len bytes at range_off go (FILE_START with CP_START_RANGE);
	 * kind CP_FILE_COMMIT: the file's @size, @stripe and the ranges'
	 * folded @sum. @from: where the receiver had its chunks begin. */
	bool range;
	uint64_t range_off, range_len, stripe, sum, from;
	/* Nothing can go yet: the hook is asked again at the next loop pass,
	 * or when a FILE_DONE comes. */
	bool wait;
	long id; /* the hook's own */
};

struct tx_hooks {
	/* The next source to send; false when there is none left. */
	bool (*next)(struct tx *t, struct tx_src *src, void *data);
	/* The receiver stored @src: @bytes with checksum @sum. */
	void (*file_done)(struct tx *t, const struct tx_src *src, uint64_t bytes, uint64_t sum,
			  void *data);
	void *data;
};

enum tx_poll_res { TX_ALIVE, TX_ENDED };

struct tx *tx_start(struct cp_loop *lp, const struct cp_opts *o, const char *host, uint16_t port,
		    const struct tx_hooks *h);
/* Give up: tell the receiver, disconnect. */
void tx_abort(struct tx *t, int result, const char *why);
/* Every loop pass; TX_ENDED once the connection is gone and @t freed, with
 * the exit code in *result and the error, if any, in @msg. */
enum tx_poll_res tx_poll(struct tx *t, int *result, char *msg, size_t msg_len);
/* Data chunks posted so far, over all sources. */
uint64_t tx_chunks(const struct tx *t);
/* Bytes the receiver has acknowledged so far, over all sources. */
uint64_t tx_bytes(const struct tx *t);
/* Bytes of files the receiver already held (resumed), over all sources. */
uint64_t tx_resumed(const struct tx *t);
/* When WELCOME came (cp_now_ns()), 0 before: data may flow from then on. */
uint64_t tx_welcome_ns(const struct tx *t);
/* Geometry the receiver granted (0 before WELCOME). */
void tx_geometry(const struct tx *t, uint32_t *chunk, uint32_t *window);

#endif
