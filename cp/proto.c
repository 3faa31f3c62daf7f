// SPDX-License-Identifier: MIT
/* ringrdma-cp wire format: encoder, decoder and the chunk admission rule. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	return get16(p) | ((uint32_t)get16(p + 2) << 16);
}

static uint64_t get64(const uint8_t *p)
{
	return get32(p) | ((uint64_t)get32(p + 4) << 32);
}

static int bad(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return -EPROTO;
}

const char *cp_type_name(unsigned int type)
{
	static const char *const names[] = {
		[CP_HELLO] = "HELLO",
		[CP_WELCOME] = "WELCOME",
		[CP_FILE_START] = "FILE_START",
		[CP_GRANT] = "GRANT",
		[CP_FILE_END] = "FILE_END",
		[CP_FILE_DONE] = "FILE_DONE",
		[CP_ERROR] = "ERROR",
		[CP_MKDIR] = "MKDIR",
		[CP_SYMLINK] = "SYMLINK",
		[CP_DIR_META] = "DIR_META",
		[CP_FILE_HAVE] = "FILE_HAVE",
		[CP_FILE_FROM] = "FILE_FROM",
		[CP_CHALLENGE] = "CHALLENGE",
		[CP_AUTH] = "AUTH",
		[CP_FILE_COMMIT] = "FILE_COMMIT",
		[CP_BUSY] = "BUSY",
	};

	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "unknown";
}

const char *cp_err_name(unsigned int code)
{
	static const char *const names[] = {
		[CP_E_PROTO] = "protocol error",
		[CP_E_AUTH] = "authentication failed",
		[CP_E_NAME] = "name refused",
		[CP_E_EXISTS] = "file exists",
		[CP_E_IO] = "I/O error",
		[CP_E_NOSPC] = "no space left",
		[CP_E_CHECKSUM] = "checksum mismatch",
		[CP_E_BUSY] = "busy",
		[CP_E_ABORT] = "aborted",
	};

	if (code && code <= CP_E_MAX)
		return names[code];
	return "unknown error";
}

bool cp_name_ok(const char *name, size_t len)
{
	size_t i = 0;

	if (!len || len > CP_NAME_MAX || name[0] == '/')
		return false;
	while (i < len) {
		size_t start = i;

		while (i < len && name[i] != '/') {
			/* NUL would cut the name short; control bytes only confuse. */
			if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
				return false;
			i++;
		}
		if (i == start)
			return false; /* "a//b" or a trailing slash */
		if ((i - start == 1 && name[start] == '.') ||
		    (i - start == 2 && name[start] == '.' && name[start + 1] == '.'))
			return false;
		i++; /* the slash */
	}
	return name[len - 1] != '/';
}

static void put_time(uint8_t *p, const struct cp_time *t)
{
	put64(p, (uint64_t)t->sec);
	put32(p + 8, t->nsec);
}

static void get_time(const uint8_t *p, struct cp_time *t)
{
	t->sec = (int64_t)get64(p);
	t->nsec = get32(p + 8);
}

/* Payload of MKDIR, SYMLINK, DIR_META: name_len, name, target_len,
 * target, mode, mtime (sec, nsec). */
static size_t entry_len(const struct cp_msg *m)
{
	return 2u + m->entry.name_len + 2u + m->entry.target_len + 4u + 12u;
}

/* The rules of each entry type: what it must and must not carry. */
static const char *entry_bad(const struct cp_msg *m)
{
	const struct cp_time *t = &m->entry.mtime;

	if (m->entry.name_len > CP_NAME_MAX || m->entry.target_len > CP_TARGET_MAX)
		return "a name or target too long";
	if (t->nsec >= 1000000000u)
		return "nanoseconds out of range";
	switch (m->type) {
	case CP_MKDIR:
		if (m->entry.target_len || m->entry.mode || t->sec || t->nsec)
			return "more than a name";
		break;
	case CP_SYMLINK:
		if (!m->entry.target_len || m->entry.mode)
			return "no target, or a mode";
		if (memchr(m->entry.target, 0, m->entry.target_len))
			return "a NUL in the target";
		break;
	default: /* CP_DIR_META */
		if (m->entry.target_len || m->entry.mode > 0777)
			return "a target, or a mode beyond 0777";
		break;
	}
	return NULL;
}

/* FILE_START's mode and mtime: without META both are zero, so that each
 * message has one encoding. */
static bool start_meta_ok(const struct cp_msg *m)
{
	if (m->start.flags & CP_START_META)
		return m->start.mode <= 0777 && m->start.mtime.nsec < 1000000000u;
	return !m->start.mode && !m->start.mtime.sec && !m->start.mtime.nsec;
}

static bool geometry_ok(uint32_t chunk, uint32_t window)
{
	return chunk >= CP_CHUNK_MIN && chunk <= CP_CHUNK_MAX && chunk % 4096 == 0 && window &&
	       window <= CP_WINDOW_MAX && !(window & (window - 1));
}

static bool text_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/*
 * One entry per message type: the payload's size rule for the decoder
 * (@min bytes at least, exactly @min when @fixed; a payload that breaks it
 * is "TYPE with a payload of N bytes"), @len, the payload length of a
 * valid message or 0 for an invalid one, @put to write it and @get to
 * parse and check it.
 */
struct cp_msg_rule {
	uint16_t min;
	bool fixed;
	size_t (*len)(const struct cp_msg *m);
	void (*put)(const struct cp_msg *m, uint8_t *p);
	int (*get)(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len);
};

static size_t hello_len(const struct cp_msg *m)
{
	if (m->hello.nonce_len != 0 && m->hello.nonce_len != CP_NONCE_LEN)
		return 0;
	return 10u + m->hello.nonce_len;
}

static void hello_put(const struct cp_msg *m, uint8_t *p)
{
	put32(p, m->hello.chunk);
	put32(p + 4, m->hello.window);
	put16(p + 8, m->hello.nonce_len);
	memcpy(p + 10, m->hello.nonce, m->hello.nonce_len);
}

static int hello_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	m->hello.chunk = get32(p);
	m->hello.window = get32(p + 4);
	m->hello.nonce_len = get16(p + 8);
	if ((m->hello.nonce_len && m->hello.nonce_len != CP_NONCE_LEN) ||
	    plen != 10u + m->hello.nonce_len)
		return bad(why, why_len, "HELLO with a nonce of %u bytes", m->hello.nonce_len);
	if (!geometry_ok(m->hello.chunk, m->hello.window))
		return bad(why, why_len, "HELLO asks for chunk %u, window %u", m->hello.chunk,
			   m->hello.window);
	memcpy(m->hello.nonce, p + 10, m->hello.nonce_len);
	return 0;
}

static size_t welcome_len(const struct cp_msg *m)
{
	(void)m;
	return 16 + CP_PROOF_LEN;
}

static void welcome_put(const struct cp_msg *m, uint8_t *p)
{
	put32(p, m->welcome.chunk);
	put32(p + 4, m->welcome.window);
	put64(p + 8, m->welcome.addr);
	memcpy(p + 16, m->welcome.proof, CP_PROOF_LEN);
}

static int welcome_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen;
	m->welcome.chunk = get32(p);
	m->welcome.window = get32(p + 4);
	m->welcome.addr = get64(p + 8);
	memcpy(m->welcome.proof, p + 16, CP_PROOF_LEN);
	if (!geometry_ok(m->welcome.chunk, m->welcome.window))
		return bad(why, why_len, "WELCOME with chunk %u, window %u", m->welcome.chunk,
			   m->welcome.window);
	if (m->welcome.addr > UINT64_MAX - (uint64_t)m->welcome.chunk * m->welcome.window)
		return bad(why, why_len, "WELCOME window wraps the address space");
	return 0;
}

/* CHALLENGE and AUTH: 32 bytes each, a nonce or a proof. */
static size_t b32_len(const struct cp_msg *m)
{
	(void)m;
	return 32;
}

static void challenge_put(const struct cp_msg *m, uint8_t *p)
{
	memcpy(p, m->challenge.nonce, CP_NONCE_LEN);
}

static int challenge_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen, (void)why, (void)why_len;
	memcpy(m->challenge.nonce, p, CP_NONCE_LEN);
	return 0;
}

static void auth_put(const struct cp_msg *m, uint8_t *p)
{
	memcpy(p, m->auth.proof, CP_PROOF_LEN);
}

static int auth_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen, (void)why, (void)why_len;
	memcpy(m->auth.proof, p, CP_PROOF_LEN);
	return 0;
}

static int name_refused(char *why, size_t why_len)
{
	bad(why, why_len, "name refused: absolute, empty, \".\", \"..\" or control characters");
	return -EACCES;
}

/* A striped file's layout: more than one stripe, at most CP_RANGES_MAX
 * ranges (without division by a hostile zero). */
static bool stripe_ok(uint64_t size, uint64_t stripe)
{
	return stripe && size > stripe && (size - 1) / stripe < CP_RANGES_MAX;
}

/* Under CP_START_RANGE: the layout's range at range_off, whole. */
static const char *range_bad(const struct cp_msg *m)
{
	uint64_t size = m->start.size, off = m->start.range_off, len = m->start.range_len;
	uint64_t stripe = m->start.stripe;

	if (!(m->start.flags & CP_START_RESUME) || (m->start.flags & CP_START_STREAM))
		return "a range not to resume, or of a stream";
	if (!stripe_ok(size, stripe))
		return "a range of a file of one stripe, or of too many ranges";
	if (off >= size || off % stripe)
		return "a range not at a stripe of the file";
	if (len != (size - off < stripe ? size - off : stripe))
		return "a range of another length than its stripe";
	return NULL;
}

/* FILE_START and FILE_COMMIT: size, flags, name_len, name, mode, mtime;
 * then a range's offset, length and stripe, or a commit's stripe and
 * sum. */
static size_t start_tail(const struct cp_msg *m)
{
	if (m->type == CP_FILE_COMMIT)
		return 16;
	return m->start.flags & CP_START_RANGE ? 24 : 0;
}

static size_t start_len(const struct cp_msg *m)
{
	if (m->start.name_len > CP_NAME_MAX)
		return 0;
	return 14u + m->start.name_len + 16u + start_tail(m);
}

static void start_put(const struct cp_msg *m, uint8_t *p)
{
	uint8_t *t = p + 30 + m->start.name_len;

	put64(p, m->start.size);
	put32(p + 8, m->start.flags);
	put16(p + 12, m->start.name_len);
	memcpy(p + 14, m->start.name, m->start.name_len);
	put32(p + 14 + m->start.name_len, m->start.mode);
	put_time(p + 18 + m->start.name_len, &m->start.mtime);
	if (m->type == CP_FILE_COMMIT) {
		put64(t, m->start.stripe);
		put64(t + 8, m->start.sum);
	} else if (m->start.flags & CP_START_RANGE) {
		put64(t, m->start.range_off);
		put64(t + 8, m->start.range_len);
		put64(t + 16, m->start.stripe);
	}
}

static int start_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	const char *what = cp_type_name(m->type);
	bool commit = m->type == CP_FILE_COMMIT;
	uint32_t known =
		commit ? CP_START_META
		       : CP_START_STREAM | CP_START_META | CP_START_RESUME | CP_START_RANGE;
	const uint8_t *t;

	m->start.size = get64(p);
	m->start.flags = get32(p + 8);
	m->start.name_len = get16(p + 12);
	if (m->start.flags & ~known)
		return bad(why, why_len, "%s with unknown flags 0x%x", what, m->start.flags);
	if (m->start.name_len > CP_NAME_MAX ||
	    plen != 14u + m->start.name_len + 16u + start_tail(m))
		return bad(why, why_len, "%s with a name of %u bytes", what, m->start.name_len);
	if ((m->start.flags & CP_START_STREAM) && m->start.size)
		return bad(why, why_len, "FILE_START of a stream with a size");
	if ((m->start.flags & CP_START_STREAM) && (m->start.flags & CP_START_RESUME))
		return bad(why, why_len, "FILE_START of a stream to resume");
	memcpy(m->start.name, p + 14, m->start.name_len);
	m->start.mode = get32(p + 14 + m->start.name_len);
	get_time(p + 18 + m->start.name_len, &m->start.mtime);
	if (!start_meta_ok(m))
		return bad(why, why_len, "%s with mode %o, mtime %lld.%u", what, m->start.mode,
			   (long long)m->start.mtime.sec, m->start.mtime.nsec);
	t = p + 30 + m->start.name_len;
	if (commit) {
		m->start.stripe = get64(t);
		m->start.sum = get64(t + 8);
		if (!stripe_ok(m->start.size, m->start.stripe))
			return bad(why, why_len, "FILE_COMMIT of %llu bytes in stripes of %llu",
				   (unsigned long long)m->start.size,
				   (unsigned long long)m->start.stripe);
	} else if (m->start.flags & CP_START_RANGE) {
		m->start.range_off = get64(t);
		m->start.range_len = get64(t + 8);
		m->start.stripe = get64(t + 16);
		what = range_bad(m);
		if (what)
			return bad(why, why_len, "FILE_START with %s", what);
	}
	if (!cp_name_ok(m->start.name, m->start.name_len))
		return name_refused(why, why_len);
	return 0;
}

/* MKDIR, SYMLINK, DIR_META */
static size_t entry_enc_len(const struct cp_msg *m)
{
	return entry_bad(m) ? 0 : entry_len(m);
}

static void entry_put(const struct cp_msg *m, uint8_t *p)
{
	size_t n = m->entry.name_len, tl = m->entry.target_len;

	put16(p, (uint16_t)n);
	memcpy(p + 2, m->entry.name, n);
	put16(p + 2 + n, (uint16_t)tl);
	memcpy(p + 4 + n, m->entry.target, tl);
	put32(p + 4 + n + tl, m->entry.mode);
	put_time(p + 8 + n + tl, &m->entry.mtime);
}

static int entry_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	size_t n, tl;
	const char *what;

	n = get16(p);
	if (n > CP_NAME_MAX || plen < 20 + n)
		return bad(why, why_len, "%s with a name of %zu bytes", cp_type_name(m->type), n);
	tl = get16(p + 2 + n);
	if (tl > CP_TARGET_MAX || plen != 20 + n + tl)
		return bad(why, why_len, "%s with a target of %zu bytes in %zu",
			   cp_type_name(m->type), tl, plen);
	m->entry.name_len = (uint16_t)n;
	m->entry.target_len = (uint16_t)tl;
	memcpy(m->entry.name, p + 2, n);
	memcpy(m->entry.target, p + 4 + n, tl);
	m->entry.mode = get32(p + 4 + n + tl);
	get_time(p + 8 + n + tl, &m->entry.mtime);
	what = entry_bad(m);
	if (what)
		return bad(why, why_len, "%s with %s", cp_type_name(m->type), what);
	if (!cp_name_ok(m->entry.name, n))
		return name_refused(why, why_len);
	return 0;
}

static size_t grant_len(const struct cp_msg *m)
{
	if (!m->grant.nkeys || m->grant.nkeys > CP_GRANT_KEYS_MAX)
		return 0;
	return 6 + 4u * m->grant.nkeys;
}

static void grant_put(const struct cp_msg *m, uint8_t *p)
{
	put32(p, m->grant.limit);
	put16(p + 4, m->grant.nkeys);
	for (unsigned int i = 0; i < m->grant.nkeys; i++)
		put32(p + 6 + 4 * i, m->grant.keys[i]);
}

static int grant_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	m->grant.limit = get32(p);
	m->grant.nkeys = get16(p + 4);
	if (!m->grant.nkeys || m->grant.nkeys > CP_GRANT_KEYS_MAX ||
	    plen != 6u + 4u * m->grant.nkeys)
		return bad(why, why_len, "GRANT with %u keys in %zu bytes", m->grant.nkeys, plen);
	for (unsigned int i = 0; i < m->grant.nkeys; i++)
		m->grant.keys[i] = get32(p + 6 + 4 * i);
	return 0;
}

/* FILE_END and FILE_DONE */
static size_t end_len(const struct cp_msg *m)
{
	(void)m;
	return 16;
}

static void end_put(const struct cp_msg *m, uint8_t *p)
{
	put64(p, m->end.bytes);
	put64(p + 8, m->end.checksum);
}

static int end_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen, (void)why, (void)why_len;
	m->end.bytes = get64(p);
	m->end.checksum = get64(p + 8);
	return 0;
}

static size_t error_len(const struct cp_msg *m)
{
	if (m->error.len > CP_TEXT_MAX)
		return 0;
	return 6u + m->error.len;
}

static void error_put(const struct cp_msg *m, uint8_t *p)
{
	put32(p, m->error.code);
	put16(p + 4, m->error.len);
	memcpy(p + 6, m->error.text, m->error.len);
}

static int error_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	m->error.code = get32(p);
	m->error.len = get16(p + 4);
	if (m->error.len > CP_TEXT_MAX || plen != 6u + m->error.len)
		return bad(why, why_len, "ERROR with a text of %u bytes", m->error.len);
	if (!m->error.code || m->error.code > CP_E_MAX)
		return bad(why, why_len, "ERROR with unknown code %u", m->error.code);
	memcpy(m->error.text, p + 6, m->error.len);
	if (!text_ok(m->error.text, m->error.len))
		return bad(why, why_len, "ERROR text is not printable ASCII");
	return 0;
}

static size_t have_len(const struct cp_msg *m)
{
	return m->have.flags & ~CP_HAVE_NAMED ? 0 : 20;
}

static void have_put(const struct cp_msg *m, uint8_t *p)
{
	put64(p, m->have.bytes);
	put64(p + 8, m->have.checksum);
	put32(p + 16, m->have.flags);
}

static int have_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen;
	m->have.bytes = get64(p);
	m->have.checksum = get64(p + 8);
	m->have.flags = get32(p + 16);
	if (m->have.flags & ~CP_HAVE_NAMED)
		return bad(why, why_len, "FILE_HAVE with unknown flags 0x%x", m->have.flags);
	return 0;
}

static size_t from_len(const struct cp_msg *m)
{
	(void)m;
	return 8;
}

static void from_put(const struct cp_msg *m, uint8_t *p)
{
	put64(p, m->from.offset);
}

static int from_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen, (void)why, (void)why_len;
	m->from.offset = get64(p);
	return 0;
}

static size_t busy_len(const struct cp_msg *m)
{
	(void)m;
	return 4;
}

static void busy_put(const struct cp_msg *m, uint8_t *p)
{
	put32(p, m->busy.secs);
}

static int busy_get(const uint8_t *p, size_t plen, struct cp_msg *m, char *why, size_t why_len)
{
	(void)plen, (void)why, (void)why_len;
	m->busy.secs = get32(p);
	return 0;
}

static const struct cp_msg_rule rules[] = {
	[CP_HELLO] = {10, false, hello_len, hello_put, hello_get},
	[CP_WELCOME] = {16 + CP_PROOF_LEN, true, welcome_len, welcome_put, welcome_get},
	[CP_FILE_START] = {14, false, start_len, start_put, start_get},
	[CP_GRANT] = {6, false, grant_len, grant_put, grant_get},
	[CP_FILE_END] = {16, true, end_len, end_put, end_get},
	[CP_FILE_DONE] = {16, true, end_len, end_put, end_get},
	[CP_ERROR] = {6, false, error_len, error_put, error_get},
	[CP_MKDIR] = {20, false, entry_enc_len, entry_put, entry_get},
	[CP_SYMLINK] = {20, false, entry_enc_len, entry_put, entry_get},
	[CP_DIR_META] = {20, false, entry_enc_len, entry_put, entry_get},
	[CP_FILE_HAVE] = {20, true, have_len, have_put, have_get},
	[CP_FILE_FROM] = {8, true, from_len, from_put, from_get},
	[CP_CHALLENGE] = {CP_NONCE_LEN, true, b32_len, challenge_put, challenge_get},
	[CP_AUTH] = {CP_PROOF_LEN, true, b32_len, auth_put, auth_get},
	[CP_FILE_COMMIT] = {14, false, start_len, start_put, start_get},
	[CP_BUSY] = {4, true, busy_len, busy_put, busy_get},
};

static const struct cp_msg_rule *rule_of(unsigned int type)
{
	if (type < sizeof(rules) / sizeof(rules[0]) && rules[type].len)
		return &rules[type];
	return NULL;
}

size_t cp_encode(const struct cp_msg *m, uint8_t *buf, size_t cap)
{
	const struct cp_msg_rule *r = rule_of(m->type);
	size_t len;

	if (!r)
		return 0;
	len = r->len(m);
	if (!len || CP_HDR_LEN + len > cap)
		return 0;
	r->put(m, buf + CP_HDR_LEN);
	put32(buf, CP_MAGIC);
	buf[4] = CP_VERSION;
	buf[5] = m->type;
	put16(buf + 6, (uint16_t)len);
	return CP_HDR_LEN + len;
}

int cp_decode(const uint8_t *buf, size_t len, struct cp_msg *m, char *why, size_t why_len)
{
	const struct cp_msg_rule *r;
	size_t plen;

	memset(m, 0, sizeof(*m));
	if (len < CP_HDR_LEN)
		return bad(why, why_len, "message of %zu bytes is shorter than a header", len);
	if (get32(buf) != CP_MAGIC)
		return bad(why, why_len, "bad magic 0x%08x", get32(buf));
	if (buf[4] != CP_VERSION)
		return bad(why, why_len, "protocol version %u, expected %u", buf[4], CP_VERSION);
	plen = get16(buf + 6);
	if (plen != len - CP_HDR_LEN)
		return bad(why, why_len, "payload length %zu in a message of %zu bytes", plen, len);
	m->type = buf[5];
	r = rule_of(m->type);
	if (!r)
		return bad(why, why_len, "unknown message type %u", m->type);
	if (plen < r->min || (r->fixed && plen != r->min))
		return bad(why, why_len, "%s with a payload of %zu bytes", cp_type_name(m->type),
			   plen);
	return r->get(buf + CP_HDR_LEN, plen, m, why, why_len);
}

int cp_rx_admit(struct cp_rx_window *w, uint32_t imm, uint32_t len, uint32_t *slot, char *why,
		size_t why_len)
{
	uint64_t want;

	if (!w->file_open)
		return bad(why, why_len, "data chunk %u outside a file", imm);
	if (imm != w->next_seq)
		return bad(why, why_len, "data chunk %u out of order (expected %u)", imm,
			   w->next_seq);
	/* Unsigned distance: the grant limit may have wrapped past zero. */
	if (w->limit - imm - 1 >= w->window)
		return bad(why, why_len, "data chunk %u was not granted (limit %u)", imm, w->limit);
	if (!len || len > w->chunk)
		return bad(why, why_len, "data chunk %u of %u bytes (chunk %u)", imm, len,
			   w->chunk);
	if (!w->stream) {
		want = w->size - w->got;
		if (want > w->chunk)
			want = w->chunk;
		if (len != want)
			return bad(why, why_len, "data chunk %u of %u bytes, expected %llu", imm,
				   len, (unsigned long long)want);
	} else if (w->got > UINT64_MAX - len) {
		return bad(why, why_len, "stream longer than 2^64 bytes");
	}
	*slot = imm % w->window;
	w->next_seq++;
	w->got += len;
	return 0;
}
