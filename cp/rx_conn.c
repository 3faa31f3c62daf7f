// SPDX-License-Identifier: MIT
/*
 * ringrdma-cp serve, one receiving connection: its log lines, control
 * SENDs, failure and disconnect. The bottom of the receiver's files
 * (rx_int.h): everything above calls down into it, nothing here calls up
 * but through the hook of struct rx (a GRANT went out).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rx_int.h"

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data);

/* SEND one control message; returns 0 or a negative errno. */
int rx_send(struct rx *r, const struct cp_msg *m)
{
	int rc = cp_ctl_send(&r->ctl, r->ep, m, send_done);

	if (!rc)
		r->last_sent = cp_now_ns();
	return rc;
}

/* A SEND that found the connection ending (-ENOTCONN) fails nothing: what
 * arrived before the end is still being handed out, a sender's ERROR may
 * be next, and on_disconnect follows to say how it ended. */
bool rx_send_failed(int rc)
{
	return rc && rc != -ENOTCONN;
}

/* A line about a connection: before authentication, rate-limited (a
 * stranger decides how many there are). */
void rx_log(struct rx *r, const char *msg)
{
	unsigned int skipped = 0;

	if (!r->authed && !cp_gate_log_ok(r->env->gate, cp_now_ns(), &skipped))
		return;
	if (skipped)
		cp_log("serve: (%u more refusals not logged)", skipped);
	cp_log("serve: %s: %s", r->peer, msg);
}

void rx_disconnect(struct rx *r)
{
	if (r->down)
		return;
	if (rr_ep_disconnect(r->ep)) {
		r->down = true; /* not connected (any more): nothing to wait for */
		r->down_at = cp_now_ns();
	}
}

/*
 * Give up on the connection: log, drop the file being received (never a
 * partial file under its final name), tell the peer why with an ERROR
 * unless @code is 0, then disconnect once that was sent.
 */
void rx_fail(struct rx *r, unsigned int code, int result, const char *fmt, ...)
{
	struct cp_msg m = {.type = CP_ERROR};
	va_list ap;
	char msg[CP_TEXT_MAX + 1];

	if (r->state == RX_CLOSING)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rx_log(r, msg);
	if (!r->result)
		r->result = result;
	/* Still in the gate while it holds a QP: refusals count toward
	 * --max-pending until they are gone, which rx_poll() makes quick. */
	/* A partial is kept for a resume when the transfer was cut, not
	 * when what it holds failed a check or may not be stored at all. */
	if ((code == CP_E_CHECKSUM || code == CP_E_PROTO || code == CP_E_EXISTS ||
	     code == CP_E_NAME) &&
	    !r->cur_range && !r->cur_commit)
		r->st.keep = false;
	/* A striped file's partial holds other ranges, maybe others'
	 * connections' at work: kept, and a resume rehashes each range. */
	/* A write or fsync of ours may still name the fd, even queued and not
	 * yet submitted: closed now, the number could go to a file opened
	 * meanwhile and the write with it. rx_free() drops the file once
	 * nothing of ours is in flight; nothing commits it from here on. */
	if (r->file_active && !r->io_inflight) {
		cp_store_abort(&r->st);
		r->file_active = false;
	}
	r->state = RX_CLOSING;
	r->closing_at = cp_now_ns();
	if (r->down || !r->accepted)
		return;
	if (code) {
		m.error.code = code;
		cp_esc(msg, m.error.text, sizeof(m.error.text));
		m.error.len = (uint16_t)strlen(m.error.text);
		if (rx_send(r, &m) == 0) {
			r->error_out = true;
			return; /* disconnect once it went out: send_done() */
		}
	}
	rx_disconnect(r);
}

void rx_abort(struct rx *r, const char *why)
{
	rx_fail(r, CP_E_ABORT, CP_EXIT_INTERRUPTED, "%s", why);
}

int rx_err_result(unsigned int code)
{
	switch (code) {
	case CP_E_IO:
	case CP_E_NOSPC:
		return CP_EXIT_LOCAL_IO;
	case CP_E_CHECKSUM:
	case CP_E_PROTO:
		return CP_EXIT_INTEGRITY;
	default:
		return CP_EXIT_REFUSED;
	}
}

/* The store gave up on the file with cp_err @code (why in r->st.why). */
void rx_store_failed(struct rx *r, int code)
{
	rx_fail(r, (unsigned int)code, rx_err_result((unsigned int)code), "%s", r->st.why);
}

static void send_done(rr_ep *ep, const struct rr_completion *c, void *data)
{
	struct rx *r = rr_ep_data(ep);
	uint8_t type = cp_ctl_sent(&r->ctl, data);

	if (type == CP_GRANT)
		r->grants_out--;
	if (type == CP_ERROR)
		r->error_out = false;
	if (c->status) {
		/* Mid-file this is a lost sender as much as a disconnect is
		 * (whichever the killed peer's QP shows first): say both. */
		if (c->status != -ECANCELED && rx_in_file(r))
			rx_fail(r, 0, CP_EXIT_NET,
				"connection lost during %s after %llu bytes (%s SEND: %s); %s",
				r->name, (unsigned long long)(r->w_off + r->w.got),
				cp_type_name(type), ibv_wc_status_str(c->wc_status),
				r->st.partial ? "the partial is kept, to resume from"
					      : "nothing stored");
		else if (c->status != -ECANCELED)
			rx_fail(r, 0, CP_EXIT_NET, "%s SEND failed: %s (%s)", cp_type_name(type),
				strerror(-c->status), ibv_wc_status_str(c->wc_status));
		if (r->state == RX_CLOSING)
			rx_disconnect(r);
		return;
	}
	if (type == CP_ERROR)
		rx_disconnect(r);
	else if (type == CP_GRANT)
		r->grant_sent(r);
}
