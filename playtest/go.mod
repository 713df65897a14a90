module github.com/ratebucket/ratebucket/playtest

go 1.26.0

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/ratebucket/ratebucket v0.0.0
	golang.org/x/net v0.60.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/ratebucket/ratebucket => ../
