package clusterslot

import "testing"

// TestOf checks slots that Redis Cluster's own CLUSTER KEYSLOT answers
// (redis-cli, Redis 7.0): the specification's examples and hash tags.
// redisstore's TestCluster checks Of against a live Cluster too.
func TestOf(t *testing.T) {
	for k, want := range map[string]int{
		"123456789":            12739, // the CRC16 check value 0x31C3, mod 16384
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key is hashed
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"foo{bar}{zap}":        5061, // the first tag only: "bar"
		"bar":                  5061,
		"":                     0,
	} {
		if got := Of(k); got != want {
			t.Errorf("Of(%q) = %d, want %d", k, got, want)
		}
	}
}
