// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for ringrdma-cp's wire format (tools/fuzz-cp runs it).
 * The first byte picks a receiver state for cp_rx_admit(); the rest is one
 * message for cp_decode(). Whatever decodes must re-encode to the same
 * bytes, and the admission rule must never hand out a slot outside the
 * window or admit more than was declared.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[CP_MSG_MAX + 64];
	struct cp_rx_window w = {0};
	struct cp_msg m;
	char why[160];
	uint32_t slot, imm, len;

	if (cp_decode(data, size, &m, why, sizeof(why)) == 0) {
		size_t n = cp_encode(&m, out, sizeof(out));

		if (n != size || memcmp(out, data, size))
			abort();
		if (m.type == CP_FILE_START &&
		    (!cp_name_ok(m.start.name, strlen(m.start.name)) || m.start.mode > 0777 ||
		     m.start.mtime.nsec >= 1000000000u))
			abort();
		/* A range lies inside its file, is not empty, and the file has
		 * more than one stripe; so does a commit's. */
		if (m.type == CP_FILE_START && (m.start.flags & CP_START_RANGE) &&
		    (!m.start.range_len || m.start.range_off >= m.start.size ||
		     m.start.range_len > m.start.size - m.start.range_off ||
		     m.start.range_len > m.start.stripe || !(m.start.flags & CP_START_RESUME)))
			abort();
		if (m.type == CP_FILE_COMMIT &&
		    (!m.start.stripe || m.start.size <= m.start.stripe ||
		     (m.start.flags & ~CP_START_META)))
			abort();
		/* A tree entry's name is checked like a file's; a link's
		 * target is all there, no NUL cutting it short. */
		if ((m.type == CP_MKDIR || m.type == CP_SYMLINK || m.type == CP_DIR_META) &&
		    (!cp_name_ok(m.entry.name, strlen(m.entry.name)) ||
		     strlen(m.entry.target) != m.entry.target_len || m.entry.mode > 0777 ||
		     (m.type == CP_SYMLINK && !m.entry.target_len)))
			abort();
	}
	if (size < 17)
		return 0;
	memcpy(&imm, data + 1, 4);
	memcpy(&len, data + 5, 4);
	w.chunk = CP_CHUNK_MIN << (data[0] & 3);
	w.window = 1u << ((data[0] >> 2) & 7);
	w.stream = data[0] & 0x20;
	w.file_open = !(data[0] & 0x40);
	memcpy(&w.next_seq, data + 9, 4);
	memcpy(&w.limit, data + 13, 4);
	w.size = w.stream ? 0 : (uint64_t)len * 3;
	for (int i = 0; i < 4; i++) {
		struct cp_rx_window before = w;

		if (cp_rx_admit(&w, imm + (uint32_t)i, len, &slot, why, sizeof(why)))
			continue;
		if (slot >= w.window || !len || len > w.chunk || w.got > before.got + len ||
		    (!w.stream && w.got > w.size) || before.limit - before.next_seq - 1 >= w.window)
			abort();
	}
	return 0;
}
