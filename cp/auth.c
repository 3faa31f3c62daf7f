// SPDX-License-Identifier: MIT
/* ringrdma-cp: mutual authentication over the token (auth.h). */
#include <errno.h>
#include <netinet/in.h>
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

int cp_auth_server_id(const struct sockaddr *sa, uint8_t id[CP_SERVER_ID_LEN])
{
	const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
	uint16_t port;

	memset(id, 0, CP_SERVER_ID_LEN);
	if (sa && sa->sa_family == AF_INET) {
		id[10] = id[11] = 0xff; /* ::ffff:a.b.c.d */
		memcpy(id + 12, &in4->sin_addr, 4);
		port = in4->sin_port;
	} else if (sa && sa->sa_family == AF_INET6) {
		memcpy(id, &in6->sin6_addr, 16);
		port = in6->sin6_port;
	} else {
		return -EAFNOSUPPORT;
	}
	memcpy(id + 16, &port, 2); /* already big-endian */
	return 0;
}

int cp_auth_proof(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		  const uint8_t client_nonce[CP_NONCE_LEN],
		  const uint8_t server_nonce[CP_NONCE_LEN],
		  const uint8_t server_id[CP_SERVER_ID_LEN], uint8_t proof[CP_PROOF_LEN])
{
	static const char label[2][20] = {"rrcp-auth-7 client", "rrcp-auth-7 server"};
	uint8_t msg[sizeof(label[0]) + 2 * CP_NONCE_LEN + CP_SERVER_ID_LEN];
	unsigned int len = 0;

	memcpy(msg, label[role == CP_AUTH_SERVER], sizeof(label[0]));
	memcpy(msg + sizeof(label[0]), client_nonce, CP_NONCE_LEN);
	memcpy(msg + sizeof(label[0]) + CP_NONCE_LEN, server_nonce, CP_NONCE_LEN);
	memcpy(msg + sizeof(label[0]) + 2 * CP_NONCE_LEN, server_id, CP_SERVER_ID_LEN);
	if (!HMAC(EVP_sha256(), token, (int)token_len, msg, sizeof(msg), proof, &len) ||
	    len != CP_PROOF_LEN)
		return -EIO;
	return 0;
}

bool cp_auth_check(const uint8_t *token, size_t token_len, enum cp_auth_role role,
		   const uint8_t client_nonce[CP_NONCE_LEN],
		   const uint8_t server_nonce[CP_NONCE_LEN],
		   const uint8_t server_id[CP_SERVER_ID_LEN], const uint8_t proof[CP_PROOF_LEN])
{
	uint8_t want[CP_PROOF_LEN];

	if (cp_auth_proof(token, token_len, role, client_nonce, server_nonce, server_id, want))
		return false;
	return CRYPTO_memcmp(want, proof, CP_PROOF_LEN) == 0;
}
