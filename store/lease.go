package store

import (
	"crypto/rand"

	"github.com/ratebucket/ratebucket/algo"
)

// CheckLease validates a lease call's key and id as every Store does
// before it acts, so that bad input changes nothing: the key ([CheckKey]
// under maxLen) and the id (algo.CheckLeaseID). The policy, when the call
// has one, is checked by its Validate method.
func CheckLease(key, id string, maxLen int) error {
	if err := CheckKey(key, maxLen); err != nil {
		return err
	}
	return algo.CheckLeaseID(id)
}

// NewLeaseID returns a fresh lease id: 128 random bits from crypto/rand, in
// 26 base32 characters. Ids are unguessable, so one holder cannot release
// another's lease by guessing its id, and they never collide in practice.
func NewLeaseID() string { return rand.Text() }
