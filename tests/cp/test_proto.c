// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp's wire format on the host (no RDMA): round trips, hand-made
 * hostile messages, the chunk admission rule, and a replay of every file
 * of the fuzzer's corpus (tests/cp/corpus) through the same checks the
 * fuzz target makes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t enc(const struct cp_msg *m, uint8_t *buf)
{
	size_t n = cp_encode(m, buf, CP_MSG_MAX);

	cr_assert(n >= CP_HDR_LEN, "encode of type %u", m->type);
	return n;
}

Test(proto, round_trip_every_type)
{
	struct cp_msg in[] = {
		{.type = CP_HELLO,
		 .hello = {.chunk = 1 << 20,
			   .window = 16,
			   .nonce_len = CP_NONCE_LEN,
			   .nonce = "0123456789abcdef"}},
		{.type = CP_HELLO, .hello = {.chunk = 4096, .window = 1}},
		{.type = CP_WELCOME,
		 .welcome = {.chunk = 65536,
			     .window = 8,
			     .addr = 0x7f0000001000ull,
			     .proof = "proof"}},
		{.type = CP_CHALLENGE, .challenge = {.nonce = "server nonce"}},
		{.type = CP_AUTH, .auth = {.proof = "client proof"}},
		{.type = CP_FILE_START, .start = {.size = 12345, .name_len = 5, .name = "a/b.c"}},
		{.type = CP_FILE_START,
		 .start = {.flags = CP_START_STREAM, .name_len = 1, .name = "s"}},
		{.type = CP_FILE_START,
		 .start = {.size = 7,
			   .flags = CP_START_META,
			   .name_len = 3,
			   .name = "a/b",
			   .mode = 0640,
			   .mtime = {-5, 999999999}}},
		{.type = CP_MKDIR, .entry = {.name_len = 7, .name = "top/sub"}},
		{.type = CP_SYMLINK,
		 .entry = {.name_len = 5,
			   .name = "top/l",
			   .target_len = 16,
			   .target = "../../etc/passwd",
			   .mtime = {1700000000, 1}}},
		{.type = CP_DIR_META,
		 .entry = {.name_len = 3,
			   .name = "top",
			   .mode = 0555,
			   .mtime = {1700000000, 123456789}}},
		{.type = CP_GRANT, .grant = {.limit = 0xffffffffu, .nkeys = 1, .keys = {7}}},
		{.type = CP_GRANT,
		 .grant = {.limit = 3, .nkeys = 3, .keys = {0x100, 0x201, 0x302}}},
		{.type = CP_FILE_END,
		 .end = {.bytes = 1ull << 40, .checksum = 0xdeadbeefcafef00dull}},
		{.type = CP_FILE_DONE, .end = {.bytes = 1, .checksum = 2}},
		{.type = CP_BUSY, .busy = {.secs = 65}},
		{.type = CP_ERROR, .error = {.code = CP_E_NOSPC, .len = 4, .text = "full"}},
		{.type = CP_FILE_START,
		 .start = {.size = 1ull << 33,
			   .flags = CP_START_RESUME,
			   .name_len = 3,
			   .name = "big"}},
		{.type = CP_FILE_HAVE,
		 .have = {.bytes = 1ull << 32, .checksum = 0x0123456789abcdefull}},
		{.type = CP_FILE_HAVE, .have = {.bytes = 7, .checksum = 9, .flags = CP_HAVE_NAMED}},
		{.type = CP_FILE_FROM, .from = {.offset = 0xfedcba9876543210ull}},
		{.type = CP_FILE_START,
		 .start = {.size = (5ull << 26) + 100,
			   .flags = CP_START_RESUME | CP_START_RANGE | CP_START_META,
			   .name_len = 3,
			   .name = "big",
			   .mode = 0600,
			   .mtime = {7, 8},
			   .range_off = 5ull << 26,
			   .range_len = 100,
			   .stripe = 1ull << 26}},
		{.type = CP_FILE_COMMIT,
		 .start = {.size = (5ull << 26) + 100,
			   .flags = CP_START_META,
			   .name_len = 3,
			   .name = "big",
			   .mode = 0644,
			   .mtime = {7, 8},
			   .stripe = 1ull << 26,
			   .sum = 0x1122334455667788ull}},
	};
	uint8_t buf[CP_MSG_MAX];
	struct cp_msg out;
	char why[160];

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		size_t n = enc(&in[i], buf);

		cr_assert_eq(cp_decode(buf, n, &out, why, sizeof(why)), 0, "%zu: %s", i, why);
		cr_assert_eq(out.type, in[i].type);
		cr_assert_eq(memcmp(&out, &in[i], sizeof(out)), 0, "message %zu differs", i);
	}
}

static int decode_hex(const char *what, const uint8_t *buf, size_t n)
{
	struct cp_msg m;
	char why[160] = "";
	int rc = cp_decode(buf, n, &m, why, sizeof(why));

	if (rc)
		cr_assert(why[0], "%s: an error without a reason", what);
	return rc;
}

/* Start from a valid FILE_START and break one thing at a time. */
static size_t start_msg(uint8_t *buf, const char *name)
{
	struct cp_msg m = {.type = CP_FILE_START, .start = {.size = 10}};

	m.start.name_len = (uint16_t)strlen(name);
	memcpy(m.start.name, name, m.start.name_len);
	return enc(&m, buf);
}

Test(proto, hostile_names_refused)
{
	static const char *const bad[] = {"/etc/passwd", "..",	 "../x", "a/../../x", "a/..",  ".",
					  "./x",	 "a//b", "a/",	 "x\x01y",    "x\x7fy"};
	uint8_t buf[CP_MSG_MAX];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(decode_hex(bad[i], buf, start_msg(buf, bad[i])), -EACCES,
			     "name \"%s\" accepted", bad[i]);
	cr_assert_eq(decode_hex("ok", buf, start_msg(buf, "sub/dir/file..txt")), 0);
	cr_assert_eq(decode_hex("ok", buf, start_msg(buf, "...")), 0);
}

Test(proto, hostile_messages_refused)
{
	uint8_t buf[CP_MSG_MAX + 8] = {0};
	size_t n;

	cr_assert_eq(decode_hex("empty", buf, 0), -EPROTO);
	n = start_msg(buf, "file");
	cr_assert_eq(decode_hex("short", buf, n - 1), -EPROTO);
	cr_assert_eq(decode_hex("header only", buf, CP_HDR_LEN), -EPROTO);
	buf[n] = 0;
	cr_assert_eq(decode_hex("trailing byte", buf, n + 1), -EPROTO);
	buf[0] ^= 1;
	cr_assert_eq(decode_hex("magic", buf, n), -EPROTO);
	buf[0] ^= 1;
	buf[4] = CP_VERSION + 1;
	cr_assert_eq(decode_hex("version", buf, n), -EPROTO);
	buf[4] = CP_VERSION;
	buf[5] = 99;
	cr_assert_eq(decode_hex("type", buf, n), -EPROTO);
	buf[5] = CP_FILE_START;
	buf[CP_HDR_LEN + 12] = 0xff; /* name length beyond the message */
	cr_assert_eq(decode_hex("name length", buf, n), -EPROTO);
	n = start_msg(buf, "file");
	buf[CP_HDR_LEN + 8] = 0x10; /* unknown flag */
	cr_assert_eq(decode_hex("flags", buf, n), -EPROTO);
	n = start_msg(buf, "file");
	buf[CP_HDR_LEN + 8] = CP_START_STREAM | CP_START_RESUME;
	memset(buf + CP_HDR_LEN, 0, 8); /* a stream has no size */
	cr_assert_eq(decode_hex("stream to resume", buf, n), -EPROTO);
	n = start_msg(buf, "fixe");
	buf[n - 16 - 2] = '\0'; /* "fi\0e", before mode and mtime */
	cr_assert_eq(decode_hex("NUL in name", buf, n), -EACCES);
}

/* FILE_START's mode and mtime: permission bits only, nanoseconds below a
 * second, and both zero without CP_START_META. */
Test(proto, file_start_meta_rules)
{
	struct cp_msg m = {.type = CP_FILE_START,
			   .start = {.size = 1,
				     .flags = CP_START_META,
				     .name_len = 1,
				     .name = "f",
				     .mode = 0777,
				     .mtime = {1, 999999999}}};
	uint8_t buf[CP_MSG_MAX];

	cr_assert_eq(decode_hex("ok", buf, enc(&m, buf)), 0);
	m.start.mode = 04755; /* setuid never crosses */
	cr_assert_eq(decode_hex("setuid", buf, enc(&m, buf)), -EPROTO);
	m.start.mode = 0755;
	m.start.mtime.nsec = 1000000000u;
	cr_assert_eq(decode_hex("nsec", buf, enc(&m, buf)), -EPROTO);
	m.start.mtime.nsec = 0;
	m.start.flags = 0; /* a mode without META */
	cr_assert_eq(decode_hex("mode without META", buf, enc(&m, buf)), -EPROTO);
	m.start.mode = 0;
	cr_assert_eq(decode_hex("mtime without META", buf, enc(&m, buf)), -EPROTO);
	m.start.mtime.sec = 0;
	cr_assert_eq(decode_hex("plain", buf, enc(&m, buf)), 0);
	/* Version 4's FILE_START, without mode and mtime, is too short. */
	m.start.flags = CP_START_META;
	buf[6] = (uint8_t)(buf[6] - 16);
	cr_assert_eq(decode_hex("v4 layout", buf, enc(&m, buf) - 16), -EPROTO);
}

/* A range of a striped file: the layout's own, whole, inside the file;
 * a commit: a file of more than one stripe. Refused at decode. */
Test(proto, ranges_checked_at_decode)
{
	const uint64_t stripe = 1ull << 20, size = 3 * stripe + 5;
	struct cp_msg m = {.type = CP_FILE_START,
			   .start = {.size = size,
				     .flags = CP_START_RESUME | CP_START_RANGE,
				     .name_len = 1,
				     .name = "f",
				     .range_off = stripe,
				     .range_len = stripe,
				     .stripe = stripe}};
	struct cp_msg c = {.type = CP_FILE_COMMIT,
			   .start = {.size = size, .name_len = 1, .name = "f", .stripe = stripe}};
	uint8_t buf[CP_MSG_MAX];
	struct cp_msg out;
	char why[160];

	cr_assert_eq(decode_hex("range 1", buf, enc(&m, buf)), 0);
	m.start.range_off = 3 * stripe; /* the tail */
	m.start.range_len = 5;
	cr_assert_eq(decode_hex("tail", buf, enc(&m, buf)), 0);
	m.start.range_len = stripe; /* past the size */
	cr_assert_eq(decode_hex("tail past the size", buf, enc(&m, buf)), -EPROTO);
	m.start.range_off = 4 * stripe;
	m.start.range_len = 5;
	cr_assert_eq(decode_hex("range past the size", buf, enc(&m, buf)), -EPROTO);
	m.start.range_off = UINT64_MAX - 4; /* wraps */
	cr_assert_eq(decode_hex("range wraps", buf, enc(&m, buf)), -EPROTO);
	m.start.range_off = stripe / 2; /* overlaps ranges 0 and 1 */
	m.start.range_len = stripe;
	cr_assert_eq(decode_hex("off the stripe", buf, enc(&m, buf)), -EPROTO);
	m.start.range_off = stripe;
	m.start.range_len = stripe - 4096; /* a part of range 1 */
	cr_assert_eq(decode_hex("short range", buf, enc(&m, buf)), -EPROTO);
	m.start.range_len = 0;
	cr_assert_eq(decode_hex("empty range", buf, enc(&m, buf)), -EPROTO);
	m.start.range_len = stripe;
	m.start.stripe = 0;
	cr_assert_eq(decode_hex("stripe 0", buf, enc(&m, buf)), -EPROTO);
	m.start.stripe = stripe;
	m.start.size = stripe; /* one stripe goes whole */
	m.start.range_off = 0;
	cr_assert_eq(decode_hex("one stripe", buf, enc(&m, buf)), -EPROTO);
	m.start.size = (uint64_t)CP_RANGES_MAX * 4096 + 1; /* 65,537 ranges */
	m.start.stripe = 4096;
	m.start.range_len = 4096;
	cr_assert_eq(decode_hex("too many ranges", buf, enc(&m, buf)), -EPROTO);
	m.start.size = (uint64_t)CP_RANGES_MAX * 4096;
	cr_assert_eq(decode_hex("65,536 ranges", buf, enc(&m, buf)), 0);
	m.start.flags = CP_START_RANGE; /* a range always resumes */
	cr_assert_eq(decode_hex("range without resume", buf, enc(&m, buf)), -EPROTO);
	/* A range's fields only under its flag: without it the message is
	 * 24 bytes too long. */
	m.start.flags = CP_START_RESUME | CP_START_RANGE;
	{
		size_t n = enc(&m, buf);

		buf[CP_HDR_LEN + 8] = CP_START_RESUME;
		cr_assert_eq(decode_hex("range fields, no flag", buf, n), -EPROTO);
	}

	cr_assert_eq(decode_hex("commit", buf, enc(&c, buf)), 0);
	cr_assert_eq(cp_decode(buf, enc(&c, buf), &out, why, sizeof(why)), 0);
	cr_assert_eq(out.start.stripe, stripe);
	c.start.stripe = 0;
	cr_assert_eq(decode_hex("commit stripe 0", buf, enc(&c, buf)), -EPROTO);
	c.start.stripe = size;
	cr_assert_eq(decode_hex("commit of one stripe", buf, enc(&c, buf)), -EPROTO);
	c.start.stripe = stripe;
	c.start.flags = CP_START_RESUME;
	cr_assert_eq(decode_hex("commit to resume", buf, enc(&c, buf)), -EPROTO);
	c.start.flags = 0;
	c.start.name_len = 2;
	memcpy(c.start.name, "..", 2);
	cr_assert_eq(decode_hex("commit of ..", buf, enc(&c, buf)), -EACCES);
}

/* Version 7's HELLO is refused, naming both versions. */
Test(proto, version_8_refused)
{
	struct cp_msg m = {.type = CP_HELLO, .hello = {.chunk = 4096, .window = 1}};
	uint8_t buf[CP_MSG_MAX];
	struct cp_msg out;
	char why[160];
	size_t n = enc(&m, buf);

	cr_assert_eq(CP_VERSION, 9);
	buf[4] = 8;
	cr_assert_eq(cp_decode(buf, n, &out, why, sizeof(why)), -EPROTO);
	cr_assert_str_eq(why, "protocol version 8, expected 9");
}

/* An entry message as the wire has it, whatever its fields: the encoder
 * would refuse the bad ones. Little-endian host assumed, as everywhere
 * the lab runs. */
static size_t raw_entry(uint8_t *buf, uint8_t type, const char *name, const char *target, size_t tl,
			uint32_t mode, int64_t sec, uint32_t nsec)
{
	size_t n = strlen(name), len = 2 + n + 2 + tl + 16;
	uint8_t *p = buf + CP_HDR_LEN;
	uint32_t magic = CP_MAGIC;
	uint16_t v16;

	memcpy(buf, &magic, 4);
	buf[4] = CP_VERSION;
	buf[5] = type;
	v16 = (uint16_t)len;
	memcpy(buf + 6, &v16, 2);
	v16 = (uint16_t)n;
	memcpy(p, &v16, 2);
	memcpy(p + 2, name, n);
	v16 = (uint16_t)tl;
	memcpy(p + 2 + n, &v16, 2);
	memcpy(p + 4 + n, target, tl);
	memcpy(p + 4 + n + tl, &mode, 4);
	memcpy(p + 8 + n + tl, &sec, 8);
	memcpy(p + 16 + n + tl, &nsec, 4);
	return CP_HDR_LEN + len;
}

/* MKDIR, SYMLINK, DIR_META: the name as strictly as a file's, and each
 * type carries only its own fields. */
Test(proto, tree_entries_refuse_hostile_fields)
{
	static const char *const names[] = {"/etc", "..", "a/../..", "a//b", "a/", "x\ny", ""};
	static const uint8_t types[] = {CP_MKDIR, CP_SYMLINK, CP_DIR_META};
	char big[CP_TARGET_MAX + 2];
	uint8_t buf[CP_MSG_MAX + 64];
	struct cp_msg m;

	cr_assert_eq(decode_hex("mkdir", buf, raw_entry(buf, CP_MKDIR, "d", "", 0, 0, 0, 0)), 0);
	cr_assert_eq(
		decode_hex("mkdir mode", buf, raw_entry(buf, CP_MKDIR, "d", "", 0, 0755, 0, 0)),
		-EPROTO);
	cr_assert_eq(decode_hex("mkdir mtime", buf, raw_entry(buf, CP_MKDIR, "d", "", 0, 0, 1, 0)),
		     -EPROTO);
	cr_assert_eq(
		decode_hex("mkdir target", buf, raw_entry(buf, CP_MKDIR, "d", "t", 1, 0, 0, 0)),
		-EPROTO);
	cr_assert_eq(decode_hex("link", buf, raw_entry(buf, CP_SYMLINK, "l", "t", 1, 0, -1, 5)), 0);
	cr_assert_eq(
		decode_hex("link no target", buf, raw_entry(buf, CP_SYMLINK, "l", "", 0, 0, 0, 0)),
		-EPROTO);
	cr_assert_eq(
		decode_hex("link mode", buf, raw_entry(buf, CP_SYMLINK, "l", "t", 1, 0777, 0, 0)),
		-EPROTO);
	cr_assert_eq(decode_hex("NUL in target", buf,
				raw_entry(buf, CP_SYMLINK, "l", "a\0b", 3, 0, 0, 0)),
		     -EPROTO);
	cr_assert_eq(decode_hex("meta", buf,
				raw_entry(buf, CP_DIR_META, "d", "", 0, 0777, 1, 999999999)),
		     0);
	cr_assert_eq(decode_hex("meta sticky", buf,
				raw_entry(buf, CP_DIR_META, "d", "", 0, 01777, 0, 0)),
		     -EPROTO);
	cr_assert_eq(decode_hex("meta nsec", buf,
				raw_entry(buf, CP_DIR_META, "d", "", 0, 0, 0, 1000000000u)),
		     -EPROTO);
	cr_assert_eq(
		decode_hex("meta target", buf, raw_entry(buf, CP_DIR_META, "d", "t", 1, 0, 0, 0)),
		-EPROTO);
	memset(big, 't', sizeof(big));
	cr_assert_eq(decode_hex("target too long", buf,
				raw_entry(buf, CP_SYMLINK, "l", big, CP_TARGET_MAX + 1, 0, 0, 0)),
		     -EPROTO);
	cr_assert_eq(decode_hex("short", buf, raw_entry(buf, CP_SYMLINK, "l", "t", 1, 0, 0, 0) - 1),
		     -EPROTO);
	/* The longest name and target fit one message. */
	m = (struct cp_msg){.type = CP_SYMLINK,
			    .entry = {.name_len = CP_NAME_MAX, .target_len = CP_TARGET_MAX}};
	memset(m.entry.name, 'n', CP_NAME_MAX);
	memset(m.entry.target, 't', CP_TARGET_MAX);
	cr_assert_eq(decode_hex("longest", buf, enc(&m, buf)), 0);
	m.entry.mode = 0755; /* the encoder keeps the rules too */
	cr_assert_eq(cp_encode(&m, buf, CP_MSG_MAX), 0);
	for (size_t t = 0; t < sizeof(types); t++)
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			cr_assert_eq(decode_hex(names[i], buf,
						raw_entry(buf, types[t], names[i], "x",
							  types[t] == CP_SYMLINK, 0, 0, 0)),
				     -EACCES, "%s \"%s\" accepted", cp_type_name(types[t]),
				     names[i]);
}

/* FILE_HAVE and FILE_FROM: exact lengths, known flags only. */
Test(proto, resume_messages_checked)
{
	struct cp_msg have = {.type = CP_FILE_HAVE, .have = {.bytes = 5, .checksum = 6}};
	struct cp_msg from = {.type = CP_FILE_FROM, .from = {.offset = 5}};
	uint8_t buf[CP_MSG_MAX + 8] = {0};
	size_t n;

	n = enc(&have, buf);
	cr_assert_eq(n, CP_HDR_LEN + 20);
	cr_assert_eq(decode_hex("have short", buf, n - 1), -EPROTO);
	buf[CP_HDR_LEN + 16] = 2; /* unknown flag */
	cr_assert_eq(decode_hex("have flags", buf, n), -EPROTO);
	have.have.flags = 2;
	cr_assert_eq(cp_encode(&have, buf, sizeof(buf)), 0, "unknown FILE_HAVE flag encoded");
	n = enc(&from, buf);
	cr_assert_eq(n, CP_HDR_LEN + 8);
	buf[6] = 9; /* payload length one more than sent */
	cr_assert_eq(decode_hex("from long", buf, n + 1), -EPROTO);
	cr_assert_eq(decode_hex("from short", buf, n - 1), -EPROTO);
	cr_assert_eq(cp_encode(&from, buf, CP_HDR_LEN + 7), 0, "FILE_FROM beyond its buffer");
	cr_assert_str_eq(cp_type_name(CP_FILE_HAVE), "FILE_HAVE");
	cr_assert_str_eq(cp_type_name(CP_FILE_FROM), "FILE_FROM");
}

/* A GRANT names one key per newly granted seq: none, too many, or a length
 * that disagrees with the count is refused. */
Test(proto, grant_keys_must_match_their_count)
{
	struct cp_msg g = {.type = CP_GRANT, .grant = {.limit = 5, .nkeys = 2, .keys = {1, 2}}};
	struct cp_msg m;
	uint8_t buf[CP_MSG_MAX];
	size_t n = enc(&g, buf);

	cr_assert_eq(decode_hex("two keys", buf, n), 0);
	buf[12] = 3; /* three keys claimed, two present */
	cr_assert_eq(decode_hex("count above length", buf, n), -EPROTO);
	buf[12] = 0;
	cr_assert_eq(decode_hex("no keys", buf, n), -EPROTO);
	buf[12] = 1;
	cr_assert_eq(decode_hex("count below length", buf, n), -EPROTO);
	g.grant.nkeys = 0;
	cr_assert_eq(cp_encode(&g, buf, sizeof(buf)), 0);
	g.grant.nkeys = CP_GRANT_KEYS_MAX + 1;
	cr_assert_eq(cp_encode(&g, buf, sizeof(buf)), 0);
	g.grant.nkeys = CP_GRANT_KEYS_MAX;
	n = enc(&g, buf);
	cr_assert(n <= CP_MSG_MAX);
	cr_assert_eq(cp_decode(buf, n, &m, NULL, 0), 0);
	cr_assert_eq(m.grant.nkeys, CP_GRANT_KEYS_MAX);
}

Test(proto, hostile_geometry_and_errors)
{
	struct cp_msg bad[] = {
		{.type = CP_HELLO, .hello = {.chunk = 4095, .window = 16}},
		{.type = CP_HELLO, .hello = {.chunk = 65536, .window = 3}},
		{.type = CP_HELLO, .hello = {.chunk = 65536, .window = 512}},
		{.type = CP_HELLO, .hello = {.chunk = 32u << 20, .window = 1}},
		{.type = CP_WELCOME, .welcome = {.chunk = 65536, .window = 3}},
		{.type = CP_WELCOME, .welcome = {.chunk = 65536, .window = 8, .addr = ~0ull}},
		{.type = CP_FILE_START,
		 .start = {.size = 5, .flags = CP_START_STREAM, .name_len = 1, .name = "s"}},
		{.type = CP_ERROR, .error = {.code = 0, .len = 1, .text = "x"}},
		{.type = CP_ERROR, .error = {.code = 99, .len = 1, .text = "x"}},
		{.type = CP_ERROR, .error = {.code = 1, .len = 2, .text = "\n"}},
	};
	uint8_t buf[CP_MSG_MAX];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(decode_hex("bad", buf, enc(&bad[i], buf)), -EPROTO,
			     "case %zu accepted", i);
}

Test(proto, encode_refuses_oversized)
{
	struct cp_msg m = {.type = CP_HELLO, .hello = {.nonce_len = CP_NONCE_LEN - 1}};
	uint8_t buf[CP_MSG_MAX];

	cr_assert_eq(cp_encode(&m, buf, sizeof(buf)), 0);
	m.type = 42;
	cr_assert_eq(cp_encode(&m, buf, sizeof(buf)), 0);
	m.type = CP_FILE_END;
	cr_assert_eq(cp_encode(&m, buf, 10), 0);
}

Test(proto, admit_in_order_granted_sized)
{
	struct cp_rx_window w = {
		.chunk = 4096, .window = 4, .limit = 4, .file_open = true, .size = 4096 * 2 + 1};
	char why[160];
	uint32_t slot;

	cr_assert_eq(cp_rx_admit(&w, 1, 4096, &slot, why, sizeof(why)), -EPROTO, "out of order");
	cr_assert_eq(cp_rx_admit(&w, 0, 4095, &slot, why, sizeof(why)), -EPROTO, "short chunk");
	cr_assert_eq(cp_rx_admit(&w, 0, 4097, &slot, why, sizeof(why)), -EPROTO, "long chunk");
	cr_assert_eq(cp_rx_admit(&w, 0, 0, &slot, why, sizeof(why)), -EPROTO, "empty chunk");
	cr_assert_eq(cp_rx_admit(&w, 0, 4096, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(slot, 0);
	cr_assert_eq(cp_rx_admit(&w, 1, 4096, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(cp_rx_admit(&w, 2, 2, &slot, why, sizeof(why)), -EPROTO, "past the size");
	cr_assert_eq(cp_rx_admit(&w, 2, 1, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(slot, 2);
	cr_assert_eq(w.got, w.size);
	cr_assert_eq(cp_rx_admit(&w, 3, 1, &slot, why, sizeof(why)), -EPROTO, "beyond the end");
	w.file_open = false;
	cr_assert_eq(cp_rx_admit(&w, 3, 1, &slot, why, sizeof(why)), -EPROTO, "no file");
}

Test(proto, admit_only_granted_across_wrap)
{
	struct cp_rx_window w = {.chunk = 4096,
				 .window = 4,
				 .stream = true,
				 .file_open = true,
				 .next_seq = 0xfffffffeu,
				 .limit = 0xfffffffeu};
	char why[160];
	uint32_t slot;

	cr_assert_eq(cp_rx_admit(&w, 0xfffffffeu, 10, &slot, why, sizeof(why)), -EPROTO,
		     "not granted yet");
	w.limit = 1; /* grants 0xfffffffe, 0xffffffff, 0 */
	cr_assert_eq(cp_rx_admit(&w, 0xfffffffeu, 10, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(slot, 2);
	cr_assert_eq(cp_rx_admit(&w, 0xffffffffu, 4096, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(slot, 3);
	cr_assert_eq(cp_rx_admit(&w, 0, 1, &slot, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(slot, 0);
	cr_assert_eq(cp_rx_admit(&w, 1, 1, &slot, why, sizeof(why)), -EPROTO, "past the limit");
}

/* Every corpus file through the fuzz target's own checks (it aborts on a
 * violation) and through the decoder. */
Test(proto, corpus_replay)
{
	const char *dir = getenv("CP_CORPUS");
	struct dirent *de;
	unsigned int n = 0;
	DIR *d;

	cr_assert(dir, "CP_CORPUS is not set");
	d = opendir(dir);
	cr_assert(d, "cannot open %s", dir);
	while ((de = readdir(d))) {
		uint8_t buf[4096];
		char path[4096];
		size_t len;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		cr_assert(f, "cannot open %s", path);
		len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput(buf, len);
		n++;
	}
	closedir(d);
	cr_assert(n >= 10, "only %u corpus files in %s", n, dir);
}
