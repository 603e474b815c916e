package localstore

import "hash/maphash"

// keyFilter is a Bloom filter of the keys a store has written while it
// restores into an empty database: a tombstone for a key it has not
// written deletes nothing, so it need not reach LevelDB. mayHave is true
// for every key added (no false negatives) and for under 1 % of the others.
// The filter grows with the keys: when its newest part holds as many keys
// as it was sized for, a part twice as large is added, so it takes 2 to 4
// bytes per key whatever their number. Not safe for concurrent use.
type keyFilter struct {
	seed  maphash.Seed
	parts []bloomPart
}

// bloomPart is one Bloom filter of the keyFilter: bloomBits bits per key it
// is sized for, bloomProbes bits set per key (about 0.1 % false positives
// when full).
type bloomPart struct {
	bits []uint64 // a power of two of them: probes take the low bits of a hash
	keys int      // added
	size int      // keys it is sized for
}

const (
	bloomBits      = 16
	bloomProbes    = 7
	bloomFirstSize = 1 << 16 // keys: a 128 KiB part
)

func newKeyFilter() *keyFilter {
	return &keyFilter{seed: maphash.MakeSeed()}
}

// newBloomPart returns a part for size keys, a power of two.
func newBloomPart(size int) bloomPart {
	return bloomPart{bits: make([]uint64, size*bloomBits/64), size: size}
}

// probes returns the two hashes the probes of key are derived from
// (double hashing: probe i is h1 + i·h2; h2 odd so that the probes differ
// modulo a power of two).
func (f *keyFilter) probes(key string) (h1, h2 uint64) {
	h := maphash.String(f.seed, key)
	return h, (h>>32 | h<<32) | 1
}

func (f *keyFilter) add(key string) {
	if len(f.parts) == 0 || f.parts[len(f.parts)-1].keys >= f.parts[len(f.parts)-1].size {
		size := bloomFirstSize
		if len(f.parts) > 0 {
			size = 2 * f.parts[len(f.parts)-1].size
		}
		f.parts = append(f.parts, newBloomPart(size))
	}
	p := &f.parts[len(f.parts)-1]
	h1, h2 := f.probes(key)
	mask := uint64(len(p.bits)*64 - 1)
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) & mask
		p.bits[b/64] |= 1 << (b % 64)
	}
	p.keys++
}

// mayHave reports whether key may have been added: always if it was.
func (f *keyFilter) mayHave(key string) bool {
	if len(f.parts) == 0 {
		return false
	}
	h1, h2 := f.probes(key)
	for pi := range f.parts {
		p := &f.parts[pi]
		mask := uint64(len(p.bits)*64 - 1)
		in := true
		for i := range uint64(bloomProbes) {
			b := (h1 + i*h2) & mask
			if p.bits[b/64]&(1<<(b%64)) == 0 {
				in = false
				break
			}
		}
		if in {
			return true
		}
	}
	return false
}
