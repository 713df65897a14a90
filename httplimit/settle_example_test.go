package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// An LLM proxy limited by tokens, a cost known only when the answer has
// streamed: each call holds an estimate of 1,000 tokens and is charged
// what the model used. A call of 90,000 tokens puts the client in debt,
// which its next call waits out.
func ExampleConfig_settle() {
	clk := clock.NewMock()
	st, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	mw, err := httplimit.New(httplimit.Config{Store: st, Clock: clk})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	// proxyToModel stands for the call to the model: it streams the answer
	// and returns the tokens used (here, the "used" query parameter).
	proxyToModel := func(w http.ResponseWriter, r *http.Request) int {
		w.Write([]byte("the answer\n"))
		used, _ := strconv.Atoi(r.URL.Query().Get("used"))
		return used
	}

	llm, err := mw.With(httplimit.Config{
		Limits: []httplimit.Limit{{Name: "tokens", Policy: algo.PerMinute(60_000).Burst(60_000)}},
		Cost:   1_000, // the estimate a call holds
		Settle: "X-LLM-Tokens",
	})
	mux.Handle("POST /v1/chat", llm.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := proxyToModel(w, r) // streams the answer, returns the tokens it used
		w.Header().Set("X-LLM-Tokens", strconv.Itoa(used))
	})))

	if err != nil {
		panic(err)
	}
	for _, used := range []int{300, 90_000, 10} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("POST", "/v1/chat?used="+strconv.Itoa(used), nil))
		fmt.Printf("%d Retry-After: %q\n", w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After: ""
	// 200 Retry-After: ""
	// 429 Retry-After: "32"
}
