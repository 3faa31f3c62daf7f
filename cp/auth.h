/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp's mutual authentication (protocol 7): each side proves it
 * holds the token without sending it. The sender's HELLO carries a random
 * nonce, the receiver's CHALLENGE another; the sender answers AUTH with
 * HMAC-SHA256(token, "rrcp-auth-7 client" || its nonce || the receiver's
 * || the receiver's address), and the receiver, once that checked,
 * WELCOME with the same over "rrcp-auth-7 server". What a side sends is
 * bound to the other's fresh nonce: recorded, it logs in nowhere later,
 * and it shows nothing of the token but to guessing offline, which 16
 * random bytes make hopeless. The address is the one the sender dialled
 * and the one the receiver was reached at (cp_auth_server_id()): a server
 * that is not the real one cannot relay a live login to the real one, as
 * the proof names its own address. It costs nothing on the wire.
 * HMAC is OpenSSL's (libcrypto), not ours.
 */
#ifndef CP_AUTH_H
#define CP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct sockaddr;

enum cp_auth_role { CP_AUTH_CLIENT, CP_AUTH_SERVER };

/* The receiver's address as the proofs name it: IPv6 (IPv4 mapped), then
 * the port, big-endian. */
#define CP_SERVER_ID_LEN 18
/* cp_auth_server_id() - @sa (AF_INET or AF_INET6) as @id: 0, or -EAFNOSUPPORT. */
int cp_auth_server_id(const struct sockaddr *sa, uint8_t id[CP_SERVER_ID_LEN]);

/* cp_auth_nonce() - CP_NONCE_LEN bytes from getrandom(): 0 or -errno. */
int cp_auth_nonce(uint8_t nonce[CP_NONCE_LEN]);
/* cp_auth_proof() - @role's proof for the two nonces under @token: 0, or
 * -EIO if libcrypto failed. */
int cp_auth_proof(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		  const uint8_t client_nonce[CP_NONCE_LEN],
		  const uint8_t server_nonce[CP_NONCE_LEN],
		  const uint8_t server_id[CP_SERVER_ID_LEN], uint8_t proof[CP_PROOF_LEN]);
/* cp_auth_check() - is @proof @role's for the nonces under @token? In
 * constant time. */
bool cp_auth_check(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		   const uint8_t client_nonce[CP_NONCE_LEN],
		   const uint8_t server_nonce[CP_NONCE_LEN],
		   const uint8_t server_id[CP_SERVER_ID_LEN], const uint8_t proof[CP_PROOF_LEN]);

#endif
