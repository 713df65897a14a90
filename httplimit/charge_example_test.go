package httplimit_test

import (
	"fmt"
	"net/http"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
)

// A login route that counts only failed attempts: three wrong passwords
// an hour per client, while successful logins, refunded as their 200
// goes out, cost nothing.
func ExampleConfig_chargeIf() {
	mw, err := httplimit.New(httplimit.Config{}) // an in-process memstore gives the tokens back
	if err != nil {
		fmt.Println(err)
		return
	}
	login, err := mw.With(httplimit.Config{
		Limits:   []httplimit.Limit{{Name: "login", Policy: algo.PerHour(3).Burst(3)}},
		ChargeIf: func(status int) bool { return status == http.StatusUnauthorized },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := login.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("password") != "hunter2" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	for range 5 {
		fmt.Print(get(h, "/login?password=hunter2", "").Code, " ")
	}
	fmt.Println("(good passwords)")
	for range 4 {
		fmt.Print(get(h, "/login?password=guess", "").Code, " ")
	}
	fmt.Println("(wrong ones)")
	// Output:
	// 200 200 200 200 200 (good passwords)
	// 401 401 401 429 (wrong ones)
}
