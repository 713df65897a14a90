package store

import "strings"

// GroupKey returns the key of the bucket name in group. Buckets whose keys
// share a group can always be taken together by [Store.TakeMulti], whatever
// the backend: a store that spreads keys over several servers keeps each
// group on one (redisstore on Redis Cluster, which hashes the part in
// braces). Callers that take several buckets of one client together (a
// burst limit and a daily quota; httplimit's limits) make their keys with
// it, with the client's identity as the group, and need not know how a
// store places keys.
//
// The key is name + "{" + group + "}", with '%', '{' and '}' escaped in
// both ("%25", "%7B", "%7D"), so distinct (group, name) pairs give
// distinct keys: GroupKey("user:42", "burst") is "burst{user:42}". The
// empty group is written "%", which no escaped group can be, so that the
// braces never hold nothing (Redis Cluster ignores empty braces).
func GroupKey(group, name string) string {
	g := "%"
	if group != "" {
		g = groupEscaper.Replace(group)
	}
	return groupEscaper.Replace(name) + "{" + g + "}"
}

var groupEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
