package topology

import (
	"encoding/binary"
	"hash"
	"strconv"
)

// Murmur2 returns a hasher that places keys as the Java client (and kafkajs)
// place them by default: murmur2(key) & 0x7fffffff, modulo the partition count.
// Sum32 is already non-negative, so Goka's and Sarama's abs-then-modulo gives
// exactly Java's partition. Use it for every processor, view and emitter.
func Murmur2() func() hash.Hash32 {
	return func() hash.Hash32 { return &murmur2{} }
}

// Partition returns the partition of key among n partitions under Murmur2.
func Partition(key string, n int32) int32 {
	return int32(murmur2Sum([]byte(key)) & 0x7fffffff % uint32(n))
}

type murmur2 struct{ buf []byte }

func (m *murmur2) Write(p []byte) (int, error) { m.buf = append(m.buf, p...); return len(p), nil }
func (m *murmur2) Sum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, m.Sum32())
}
func (m *murmur2) Reset()         { m.buf = m.buf[:0] }
func (m *murmur2) Size() int      { return 4 }
func (m *murmur2) BlockSize() int { return 4 }
func (m *murmur2) Sum32() uint32  { return murmur2Sum(m.buf) & 0x7fffffff }

// murmur2Sum is Kafka's Utils.murmur2 (seed 0x9747b28c), as an unsigned value.
func murmur2Sum(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	length := len(data)
	h := uint32(seed) ^ uint32(length)
	n := length / 4
	for i := 0; i < n; i++ {
		k := binary.LittleEndian.Uint32(data[i*4:])
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n*4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// ReservedPrefix starts the keys the scheduler uses itself (a partition's
// tick key, under which its table also keeps the partition's fired mark);
// no user id may start with it.
const ReservedPrefix = "__ivrsched-"

// TickKeys returns, for each of n partitions, a key that Murmur2 places on
// that partition, so a tick can be addressed to one partition.
func TickKeys(n int32) []string {
	keys := make([]string, n)
	found := int32(0)
	for i := 0; found < n; i++ {
		k := ReservedPrefix + "tick-" + strconv.Itoa(i)
		if p := Partition(k, n); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}
