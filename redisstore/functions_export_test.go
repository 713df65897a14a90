package redisstore

// FunctionLoads reports how many times s has loaded its Function library.
func FunctionLoads(s *Store) int64 { return s.fn.loads.Load() }
