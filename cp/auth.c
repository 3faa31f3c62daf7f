// SPDX-License-Identifier: MIT
/* ringrdma-cp: mutual authentication over the token (auth.h). */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

#include "auth.h"

int cp_auth_nonce(uint8_t nonce[CP_NONCE_LEN])
{
	ssize_t n = getrandom(nonce, CP_NONCE_LEN, 0);

	return n == CP_NONCE_LEN ? 0 : n < 0 ? -errno : -EIO;
}

int cp_auth_proof(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		  const uint8_t client_nonce[CP_NONCE_LEN],
		  const uint8_t server_nonce[CP_NONCE_LEN], uint8_t proof[CP_PROOF_LEN])
{
	static const char label[2][20] = {"rrcp-auth-6 client", "rrcp-auth-6 server"};
	uint8_t msg[sizeof(label[0]) + 2 * CP_NONCE_LEN];
	unsigned int len = 0;

	memcpy(msg, label[role == CP_AUTH_SERVER], sizeof(label[0]));
	memcpy(msg + sizeof(label[0]), client_nonce, CP_NONCE_LEN);
	memcpy(msg + sizeof(label[0]) + CP_NONCE_LEN, server_nonce, CP_NONCE_LEN);
	if (!HMAC(EVP_sha256(), token, (int)token_len, msg, sizeof(msg), proof, &len) ||
	    len != CP_PROOF_LEN)
		return -EIO;
	return 0;
}

bool cp_auth_check(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		   const uint8_t client_nonce[CP_NONCE_LEN],
		   const uint8_t server_nonce[CP_NONCE_LEN], const uint8_t proof[CP_PROOF_LEN])
{
	uint8_t want[CP_PROOF_LEN];

	if (cp_auth_proof(token, token_len, role, client_nonce, server_nonce, want))
		return false;
	return CRYPTO_memcmp(want, proof, CP_PROOF_LEN) == 0;
}
