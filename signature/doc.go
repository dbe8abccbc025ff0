// Package signature is the signing contract between the relay and its consumers: how each
// webhook is signed, and how a consumer, in Go or any other language, checks it. The relay
// signs with Signer; package inbox verifies with VerifyX, VerifyStandard and Fresh; a consumer
// that does not use inbox can call them directly, or reimplement them from this page.
//
// # X-Signature (the default scheme)
//
// Each delivery carries two headers:
//
//	X-Timestamp: 1700000000
//	X-Signature: sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8
//
// X-Timestamp is the time of this attempt in decimal unix seconds. The signature is the
// lowercase hex of HMAC-SHA256, keyed with the secret's bytes as they are (no decoding), over
// the X-Timestamp header's bytes immediately followed by the exact body bytes, with no
// separator:
//
//	HMAC-SHA256(key = "topsecret", message = `1700000000{"order_id":42}`)
//
// The same with openssl, to check another implementation:
//
//	printf '1700000000{"order_id":42}' | openssl dgst -sha256 -hmac 'topsecret'
//
// Verify over the raw body as received, before any JSON decoding: re-encoded JSON is
// different bytes. The event id (X-Event-Id) is not signed under this scheme; see the replay
// window below.
//
// # Standard Webhooks
//
// With --signature-scheme standard-webhooks the relay follows Standard Webhooks v1
// (https://www.standardwebhooks.com), so its libraries verify the deliveries:
//
//	webhook-id: 0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f
//	webhook-timestamp: 1614265330
//	webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
//
// The signature is the standard (padded) base64 of HMAC-SHA256 over
// "<webhook-id>.<webhook-timestamp>.<body>". The secret must look like `whsec_<base64>`;
// the key is the base64-decoded part after `whsec_`, not the string itself (DecodeWhsec, Keys).
// Here the id is signed too.
//
// # Key rotation
//
// A Signer holds one key per configured secret and sends one signature per key, in the order
// given: comma-separated under X-Signature, space-separated under Standard Webhooks:
//
//	X-Signature: sha256=<hex with old>,sha256=<hex with new>
//	webhook-signature: v1,<base64 with old> v1,<base64 with new>
//
// A receiver accepts when any entry matches any key it knows, so to rotate: give the relay
// "old,new", move the consumers to "new" (or "old,new"), then drop "old" from the relay.
// Receivers skip entries they do not understand (another algorithm, Standard Webhooks' "v1a"),
// read at most MaxEntries, and compare every pair in constant time.
//
// # Replay window
//
// A valid signature proves who sent the bytes, not when. The signed timestamp says when: a
// receiver refuses it when it is further than a tolerance from its own clock, in the past or
// in the future (Fresh; DefaultTolerance is 5 minutes, as in the Standard Webhooks libraries).
// So a captured request can be replayed only within that window, and the inbox's record of
// event ids absorbs such a replay as a duplicate. Each retry is signed afresh with the time of
// that attempt, so a delivery retried for hours stays fresh.
package signature
