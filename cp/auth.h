/* SPDX-License-Identifier: MIT */
/*
 * ringrdma-cp's mutual authentication (protocol 6): each side proves it
 * holds the token without sending it. The sender's HELLO carries a random
 * nonce, the receiver's CHALLENGE another; the sender answers AUTH with
 * HMAC-SHA256(token, "rrcp-auth-6 client" || its nonce || the receiver's),
 * and the receiver, once that checked, WELCOME with the same over
 * "rrcp-auth-6 server". What a side sends is bound to the other's fresh
 * nonce: recorded, it logs in nowhere later, and it shows nothing of the
 * token but to guessing offline, which 16 random bytes make hopeless.
 * HMAC is OpenSSL's (libcrypto), not ours.
 */
#ifndef CP_AUTH_H
#define CP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

enum cp_auth_role { CP_AUTH_CLIENT, CP_AUTH_SERVER };

/* cp_auth_nonce() - CP_NONCE_LEN bytes from getrandom(): 0 or -errno. */
int cp_auth_nonce(uint8_t nonce[CP_NONCE_LEN]);
/* cp_auth_proof() - @role's proof for the two nonces under @token: 0, or
 * -EIO if libcrypto failed. */
int cp_auth_proof(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		  const uint8_t client_nonce[CP_NONCE_LEN],
		  const uint8_t server_nonce[CP_NONCE_LEN], uint8_t proof[CP_PROOF_LEN]);
/* cp_auth_check() - is @proof @role's for the nonces under @token? In
 * constant time. */
bool cp_auth_check(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		   const uint8_t client_nonce[CP_NONCE_LEN],
		   const uint8_t server_nonce[CP_NONCE_LEN], const uint8_t proof[CP_PROOF_LEN]);

#endif
