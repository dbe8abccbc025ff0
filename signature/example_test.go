package signature_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// Sign a body as the relay does, with the default scheme.
func ExampleAppendX() {
	keys, err := signature.Keys(signature.XSignature, []string{"topsecret"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(signature.AppendX(nil, keys, 1700000000, []byte(`{"order_id":42}`))))
	// Output:
	// sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8
}

// Sign as Standard Webhooks (the spec's own example), mid-rotation: one entry per secret.
func ExampleAppendStandard() {
	keys, err := signature.Keys(signature.StandardWebhooks, []string{
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"whsec_c2Vjb25kLWtleS1mb3Itcm90YXRpb24h",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(signature.AppendStandard(nil, keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))))
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,XyCMG3sa1LpyP6Ucp8uYh/7H750WoyT1iYkfXnNfSoQ=
}

// Verify a delivery in a plain net/http handler: the signature over the raw body first, then
// the age of the signed timestamp. (Package inbox does this, and records each event id once.)
func Example_verify() {
	keys, err := signature.Keys(signature.XSignature, signature.SplitSecrets("topsecret"))
	if err != nil {
		log.Fatal(err)
	}
	webhook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		ts := r.Header.Get(signature.HeaderXTimestamp)
		if !signature.VerifyX(keys, ts, body, r.Header.Values(signature.HeaderXSignature)...) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || !signature.Fresh(sec, time.Now(), signature.DefaultTolerance) {
			http.Error(w, "stale timestamp", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "accepted %s\n", body)
	})
	srv := httptest.NewServer(webhook)
	defer srv.Close()

	// What the relay sends, signed now; then the same request, captured and replayed an hour on.
	body := []byte(`{"order_id":42}`)
	for _, at := range []time.Time{time.Now(), time.Now().Add(-time.Hour)} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set(signature.HeaderXTimestamp, strconv.FormatInt(at.Unix(), 10))
		req.Header.Set(signature.HeaderXSignature, string(signature.AppendX(nil, keys, at.Unix(), body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s", resp.StatusCode, answer)
	}
	// Output:
	// 200 accepted {"order_id":42}
	// 401 stale timestamp
}
