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
		[CP_HELLO] = "HELLO", [CP_WELCOME] = "WELCOME",	  [CP_FILE_START] = "FILE_START",
		[CP_GRANT] = "GRANT", [CP_FILE_END] = "FILE_END", [CP_FILE_DONE] = "FILE_DONE",
		[CP_ERROR] = "ERROR", [CP_MKDIR] = "MKDIR",	  [CP_SYMLINK] = "SYMLINK",
		[CP_DIR_META] = "DIR_META", [CP_FILE_HAVE] = "FILE_HAVE", [CP_FILE_FROM] = "FILE_FROM",
		[CP_CHALLENGE] = "CHALLENGE", [CP_AUTH] = "AUTH",
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

size_t cp_encode(const struct cp_msg *m, uint8_t *buf, size_t cap)
{
	uint8_t *p = buf + CP_HDR_LEN;
	size_t len;

	switch (m->type) {
	case CP_HELLO:
		if (m->hello.nonce_len != 0 && m->hello.nonce_len != CP_NONCE_LEN)
			return 0;
		len = 10 + m->hello.nonce_len;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put32(p, m->hello.chunk);
		put32(p + 4, m->hello.window);
		put16(p + 8, m->hello.nonce_len);
		memcpy(p + 10, m->hello.nonce, m->hello.nonce_len);
		break;
	case CP_WELCOME:
		len = 16 + CP_PROOF_LEN;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put32(p, m->welcome.chunk);
		put32(p + 4, m->welcome.window);
		put64(p + 8, m->welcome.addr);
		memcpy(p + 16, m->welcome.proof, CP_PROOF_LEN);
		break;
	case CP_CHALLENGE:
		len = CP_NONCE_LEN;
		if (CP_HDR_LEN + len > cap)
			return 0;
		memcpy(p, m->challenge.nonce, CP_NONCE_LEN);
		break;
	case CP_AUTH:
		len = CP_PROOF_LEN;
		if (CP_HDR_LEN + len > cap)
			return 0;
		memcpy(p, m->auth.proof, CP_PROOF_LEN);
		break;
	case CP_FILE_START:
		if (m->start.name_len > CP_NAME_MAX)
			return 0;
		len = 14 + m->start.name_len + 16;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put64(p, m->start.size);
		put32(p + 8, m->start.flags);
		put16(p + 12, m->start.name_len);
		memcpy(p + 14, m->start.name, m->start.name_len);
		put32(p + 14 + m->start.name_len, m->start.mode);
		put_time(p + 18 + m->start.name_len, &m->start.mtime);
		break;
	case CP_MKDIR:
	case CP_SYMLINK:
	case CP_DIR_META: {
		size_t n = m->entry.name_len, tl = m->entry.target_len;

		if (entry_bad(m))
			return 0;
		len = entry_len(m);
		if (CP_HDR_LEN + len > cap)
			return 0;
		put16(p, (uint16_t)n);
		memcpy(p + 2, m->entry.name, n);
		put16(p + 2 + n, (uint16_t)tl);
		memcpy(p + 4 + n, m->entry.target, tl);
		put32(p + 4 + n + tl, m->entry.mode);
		put_time(p + 8 + n + tl, &m->entry.mtime);
		break;
	}
	case CP_GRANT:
		if (!m->grant.nkeys || m->grant.nkeys > CP_GRANT_KEYS_MAX)
			return 0;
		len = 6 + 4u * m->grant.nkeys;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put32(p, m->grant.limit);
		put16(p + 4, m->grant.nkeys);
		for (unsigned int i = 0; i < m->grant.nkeys; i++)
			put32(p + 6 + 4 * i, m->grant.keys[i]);
		break;
	case CP_FILE_END:
	case CP_FILE_DONE:
		len = 16;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put64(p, m->end.bytes);
		put64(p + 8, m->end.checksum);
		break;
	case CP_ERROR:
		if (m->error.len > CP_TEXT_MAX)
			return 0;
		len = 6 + m->error.len;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put32(p, m->error.code);
		put16(p + 4, m->error.len);
		memcpy(p + 6, m->error.text, m->error.len);
		break;
	case CP_FILE_HAVE:
		if (m->have.flags & ~CP_HAVE_NAMED)
			return 0;
		len = 20;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put64(p, m->have.bytes);
		put64(p + 8, m->have.checksum);
		put32(p + 16, m->have.flags);
		break;
	case CP_FILE_FROM:
		len = 8;
		if (CP_HDR_LEN + len > cap)
			return 0;
		put64(p, m->from.offset);
		break;
	default:
		return 0;
	}
	put32(buf, CP_MAGIC);
	buf[4] = CP_VERSION;
	buf[5] = m->type;
	put16(buf + 6, (uint16_t)len);
	return CP_HDR_LEN + len;
}

int cp_decode(const uint8_t *buf, size_t len, struct cp_msg *m, char *why, size_t why_len)
{
	const uint8_t *p = buf + CP_HDR_LEN;
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
	switch (m->type) {
	case CP_HELLO:
		if (plen < 10)
			break;
		m->hello.chunk = get32(p);
		m->hello.window = get32(p + 4);
		m->hello.nonce_len = get16(p + 8);
		if ((m->hello.nonce_len && m->hello.nonce_len != CP_NONCE_LEN) ||
		    plen != 10u + m->hello.nonce_len)
			return bad(why, why_len, "HELLO with a nonce of %u bytes",
				   m->hello.nonce_len);
		if (!geometry_ok(m->hello.chunk, m->hello.window))
			return bad(why, why_len, "HELLO asks for chunk %u, window %u",
				   m->hello.chunk, m->hello.window);
		memcpy(m->hello.nonce, p + 10, m->hello.nonce_len);
		return 0;
	case CP_CHALLENGE:
		if (plen != CP_NONCE_LEN)
			break;
		memcpy(m->challenge.nonce, p, CP_NONCE_LEN);
		return 0;
	case CP_AUTH:
		if (plen != CP_PROOF_LEN)
			break;
		memcpy(m->auth.proof, p, CP_PROOF_LEN);
		return 0;
	case CP_WELCOME:
		if (plen != 16 + CP_PROOF_LEN)
			break;
		m->welcome.chunk = get32(p);
		m->welcome.window = get32(p + 4);
		m->welcome.addr = get64(p + 8);
		memcpy(m->welcome.proof, p + 16, CP_PROOF_LEN);
		if (!geometry_ok(m->welcome.chunk, m->welcome.window))
			return bad(why, why_len, "WELCOME with chunk %u, window %u",
				   m->welcome.chunk, m->welcome.window);
		if (m->welcome.addr > UINT64_MAX - (uint64_t)m->welcome.chunk * m->welcome.window)
			return bad(why, why_len, "WELCOME window wraps the address space");
		return 0;
	case CP_FILE_START:
		if (plen < 14)
			break;
		m->start.size = get64(p);
		m->start.flags = get32(p + 8);
		m->start.name_len = get16(p + 12);
		if (m->start.name_len > CP_NAME_MAX || plen != 14u + m->start.name_len + 16u)
			return bad(why, why_len, "FILE_START with a name of %u bytes",
				   m->start.name_len);
		if (m->start.flags & ~(CP_START_STREAM | CP_START_META | CP_START_RESUME))
			return bad(why, why_len, "FILE_START with unknown flags 0x%x",
				   m->start.flags);
		if ((m->start.flags & CP_START_STREAM) && m->start.size)
			return bad(why, why_len, "FILE_START of a stream with a size");
		if ((m->start.flags & CP_START_STREAM) && (m->start.flags & CP_START_RESUME))
			return bad(why, why_len, "FILE_START of a stream to resume");
		memcpy(m->start.name, p + 14, m->start.name_len);
		m->start.mode = get32(p + 14 + m->start.name_len);
		get_time(p + 18 + m->start.name_len, &m->start.mtime);
		if (!start_meta_ok(m))
			return bad(why, why_len, "FILE_START with mode %o, mtime %lld.%u",
				   m->start.mode, (long long)m->start.mtime.sec,
				   m->start.mtime.nsec);
		if (!cp_name_ok(m->start.name, m->start.name_len)) {
			bad(why, why_len,
			    "name refused: absolute, empty, \".\", \"..\" or control characters");
			return -EACCES;
		}
		return 0;
	case CP_MKDIR:
	case CP_SYMLINK:
	case CP_DIR_META: {
		size_t n, tl;
		const char *what;

		if (plen < 20)
			break;
		n = get16(p);
		if (n > CP_NAME_MAX || plen < 20 + n)
			return bad(why, why_len, "%s with a name of %zu bytes", cp_type_name(m->type),
				   n);
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
		if (!cp_name_ok(m->entry.name, n)) {
			bad(why, why_len,
			    "name refused: absolute, empty, \".\", \"..\" or control characters");
			return -EACCES;
		}
		return 0;
	}
	case CP_GRANT:
		if (plen < 6)
			break;
		m->grant.limit = get32(p);
		m->grant.nkeys = get16(p + 4);
		if (!m->grant.nkeys || m->grant.nkeys > CP_GRANT_KEYS_MAX ||
		    plen != 6u + 4u * m->grant.nkeys)
			return bad(why, why_len, "GRANT with %u keys in %zu bytes", m->grant.nkeys,
				   plen);
		for (unsigned int i = 0; i < m->grant.nkeys; i++)
			m->grant.keys[i] = get32(p + 6 + 4 * i);
		return 0;
	case CP_FILE_END:
	case CP_FILE_DONE:
		if (plen != 16)
			break;
		m->end.bytes = get64(p);
		m->end.checksum = get64(p + 8);
		return 0;
	case CP_ERROR:
		if (plen < 6)
			break;
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
	case CP_FILE_HAVE:
		if (plen != 20)
			break;
		m->have.bytes = get64(p);
		m->have.checksum = get64(p + 8);
		m->have.flags = get32(p + 16);
		if (m->have.flags & ~CP_HAVE_NAMED)
			return bad(why, why_len, "FILE_HAVE with unknown flags 0x%x",
				   m->have.flags);
		return 0;
	case CP_FILE_FROM:
		if (plen != 8)
			break;
		m->from.offset = get64(p);
		return 0;
	default:
		return bad(why, why_len, "unknown message type %u", m->type);
	}
	return bad(why, why_len, "%s with a payload of %zu bytes", cp_type_name(m->type), plen);
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
