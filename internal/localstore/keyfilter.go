package localstore

import "hash/maphash"

// keyFilter is a Bloom filter of the keys a store may hold (store.keys):
// a key it has not is not in the store, so a read of it or a restored
// tombstone of it need not reach LevelDB. mayHave is true for every key
// added (no false negatives) and for under 1 % of the others.
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

// hash is the hash of a key the filter's probes are derived from; a key's
// bytes hash as its string does.
func (f *keyFilter) hash(key string) uint64      { return maphash.String(f.seed, key) }
func (f *keyFilter) hashBytes(key []byte) uint64 { return maphash.Bytes(f.seed, key) }

// probes returns the two hashes the probes of a key are derived from
// (double hashing: probe i is h1 + i·h2; h2 odd so that the probes differ
// modulo a power of two).
func probes(h uint64) (h1, h2 uint64) {
	return h, (h>>32 | h<<32) | 1
}

// add adds key unless the filter may have it already (a key written again
// and again does not grow the filter), and says whether it did.
func (f *keyFilter) add(key string) bool { return f.insert(f.hash(key)) }

// insert is add for the key of hash h.
func (f *keyFilter) insert(h uint64) bool {
	if f.mayHaveHash(h) {
		return false
	}
	if len(f.parts) == 0 || f.parts[len(f.parts)-1].keys >= f.parts[len(f.parts)-1].size {
		size := bloomFirstSize
		if len(f.parts) > 0 {
			size = 2 * f.parts[len(f.parts)-1].size
		}
		f.parts = append(f.parts, newBloomPart(size))
	}
	p := &f.parts[len(f.parts)-1]
	h1, h2 := probes(h)
	mask := uint64(len(p.bits)*64 - 1)
	for i := range uint64(bloomProbes) {
		b := (h1 + i*h2) & mask
		p.bits[b/64] |= 1 << (b % 64)
	}
	p.keys++
	return true
}

// mayHave reports whether key may have been added: always if it was.
func (f *keyFilter) mayHave(key string) bool { return f.mayHaveHash(f.hash(key)) }

func (f *keyFilter) mayHaveHash(h uint64) bool {
	h1, h2 := probes(h)
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

// keys is how many keys were added.
func (f *keyFilter) keys() int {
	n := 0
	for _, p := range f.parts {
		n += p.keys
	}
	return n
}
