package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"sync"
	"time"

	"github.com/msgpulse/msgpulse/pkg/client"
)

// exampleServer is a tiny stand-in for msgpulse: it issues the code
// "123456", allows three wrong guesses, and refuses a second code within the
// resend cooldown, answering the way the real server does.
func exampleServer() *httptest.Server {
	var (
		mu       sync.Mutex
		issued   bool
		attempts = 3
	)
	reply := func(w http.ResponseWriter, status int, msg string, data any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "msg": msg, "data": data})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/verification-codes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if issued {
			w.Header().Set("Retry-After", "60")
			reply(w, http.StatusTooManyRequests, "resend cooldown: wait 60s before requesting another code", nil)
			return
		}
		issued = true
		reply(w, http.StatusAccepted, "verification code queued", map[string]any{
			"taskId": "0196a4b2-7c3e-7d1a-9f2b-3c4d5e6f7a8b", "status": "queued",
			"expiresAt": "2026-05-04T10:20:00Z", "resendAfter": "2026-05-04T10:11:00Z",
		})
	})
	mux.HandleFunc("POST /api/verification-codes/verify", func(w http.ResponseWriter, r *http.Request) {
		var req client.VerifyRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			reply(w, http.StatusBadRequest, "malformed JSON", nil)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case req.Code == "123456" && attempts > 0:
			attempts = 0 // a code is single use
			reply(w, http.StatusOK, "code is valid", map[string]any{"valid": true, "attemptsLeft": 0})
		case attempts > 1:
			attempts--
			reply(w, http.StatusOK, "code is not valid", map[string]any{"valid": false, "attemptsLeft": attempts})
		default:
			attempts = 0
			reply(w, http.StatusTooManyRequests, "too many wrong attempts: the code is no longer valid, request a new one",
				map[string]any{"valid": false, "attemptsLeft": 0})
		}
	})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "example-key" {
			reply(w, http.StatusUnauthorized, "unknown API key", nil)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

func ExampleClient_RequestVerificationCode() {
	srv := exampleServer()
	defer srv.Close()

	c, err := client.New(srv.URL, "example-key", client.WithTimeout(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	code, err := c.RequestVerificationCode(context.Background(), client.VerificationCodeRequest{
		Channel:   client.ChannelEmail,
		Recipient: "alice@example.com",
		Purpose:   "register",
		Locale:    client.LocaleEn,
		ClientIP:  "203.0.113.7", // the end user's address, for the per-IP limit
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("status:", code.Status)
	fmt.Println("expires at:", code.ExpiresAt.Format(time.RFC3339))
	fmt.Println("resend after:", code.ResendAfter.Format(time.RFC3339))
	// Output:
	// status: queued
	// expires at: 2026-05-04T10:20:00Z
	// resend after: 2026-05-04T10:11:00Z
}

func ExampleClient_VerifyCode() {
	srv := exampleServer()
	defer srv.Close()
	c, err := client.New(srv.URL, "example-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	for _, guess := range []string{"000000", "123456"} {
		res, err := c.VerifyCode(ctx, client.VerifyRequest{
			Channel: client.ChannelEmail, Recipient: "alice@example.com", Purpose: "register", Code: guess,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		// A wrong code is an answer, not an error.
		fmt.Printf("%s: valid=%t attemptsLeft=%d\n", guess, res.Valid, res.AttemptsLeft)
	}
	// Output:
	// 000000: valid=false attemptsLeft=2
	// 123456: valid=true attemptsLeft=0
}

// When too many wrong guesses burn the code, VerifyCode returns the result
// and a 429 *APIError together.
func ExampleClient_VerifyCode_burned() {
	srv := exampleServer()
	defer srv.Close()
	c, err := client.New(srv.URL, "example-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		res, err := c.VerifyCode(context.Background(), client.VerifyRequest{
			Channel: client.ChannelSMS, Recipient: "+8613900001234", Purpose: "login", Code: "999999",
		})
		if _, limited := client.IsRateLimited(err); limited && res != nil {
			fmt.Printf("burned: valid=%t attemptsLeft=%d\n", res.Valid, res.AttemptsLeft)
			var apiErr *client.APIError
			if errors.As(err, &apiErr) {
				fmt.Println(apiErr.StatusCode, apiErr.Msg)
			}
			return
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("wrong, attempts left:", res.AttemptsLeft)
	}
	// Output:
	// wrong, attempts left: 2
	// wrong, attempts left: 1
	// burned: valid=false attemptsLeft=0
	// 429 too many wrong attempts: the code is no longer valid, request a new one
}

func ExampleIsRateLimited() {
	srv := exampleServer()
	defer srv.Close()
	c, err := client.New(srv.URL, "example-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	req := client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: "+8613900001234", Purpose: "login"}

	for range 2 {
		_, err := c.RequestVerificationCode(context.Background(), req)
		if retryAfter, limited := client.IsRateLimited(err); limited {
			// Tell the user when to try again; do not retry in a loop.
			fmt.Println("rate limited, retry in", retryAfter)
			fmt.Println(err)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("code sent")
	}
	// Output:
	// code sent
	// rate limited, retry in 1m0s
	// msgpulse: HTTP 429: resend cooldown: wait 60s before requesting another code (retry after 1m0s)
}

func ExampleIsNotFound() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprint(w, `{"code":404,"msg":"no message with taskId `+path.Base(r.URL.Path)+`","data":null}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "example-key")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = c.GetMessage(context.Background(), "0196a4b2-0000-7000-8000-000000000000")
	if client.IsNotFound(err) {
		fmt.Println("unknown task:", err)
	}
	// Output:
	// unknown task: msgpulse: HTTP 404: no message with taskId 0196a4b2-0000-7000-8000-000000000000
}
