package policy

import (
	"hash/fnv"
	"time"
)

// spreadOffset is where in the first span of a window a deferred call
// goes: a whole number of seconds in [0, span), from a hash of its call
// id, so the same call always gets the same offset and calls deferred to
// one opening are spread evenly over it.
func spreadOffset(callID string, span time.Duration) time.Duration {
	secs := uint64(span / time.Second)
	if secs <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(callID))
	return time.Duration(mix64(h.Sum64())%secs) * time.Second
}

// mix64 is SplitMix64's finalizer: FNV-1a's low bits follow the last bytes
// of the input closely (call ids that differ in one character), this
// spreads every input bit over the whole word.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
