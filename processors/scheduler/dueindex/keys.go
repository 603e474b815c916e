package dueindex

import (
	"strings"
	"unsafe"
)

// item is a follow-up in the due index's B-tree: its due time and where its
// user and task ids are kept in the index's keys. It holds no pointers, so
// the garbage collector neither traces the tree's item arrays nor the ids:
// with millions pending, tracing one string pointer per id made every
// collection of the heap take hundreds of milliseconds of a core.
type item struct {
	due        int64
	ref        uint32 // slot in keys; probeRef: the index's probe
	ulen, tlen uint16 // lengths of the user and task ids (unused for ids kept apart)
}

// probeRef marks an item that stands for Index.probe, a position being
// looked up, whose ids are not in the keys.
const probeRef = ^uint32(0)

// Slot sizes of keys: an id pair takes the smallest slot it fits in, so at
// most a third of a slot is unused (past 16 bytes).
var slotSizes = [...]int{16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096}

const (
	slabBytes = 64 << 10
	classBits = 5              // a ref's top bits: its slot size class, or bigClass
	slotBits  = 32 - classBits // a ref's other bits: the slot's number in its class
	slotMask  = uint32(1)<<slotBits - 1
	maxSlots  = slotMask         // slots per class, about 134 M (the all-ones ref is probeRef)
	bigClass  = 1<<classBits - 1 // ids kept as strings (too long for a slot, or their class full)
)

// keys keeps the user and task ids of the index's items in slabs of plain
// bytes, in fixed-size slots with free lists per size: putting and freeing
// an id pair costs no allocation once the slabs have grown, and no
// collector work ever. An id pair longer than the largest slot (4 KiB), or
// with an id of 64 KiB or more, is kept apart as strings (rare).
type keys struct {
	classes [len(slotSizes)]slotClass
	big     []bigKey
	bigFree []uint32
}

type slotClass struct {
	slabs [][]byte
	free  []uint32 // numbers of freed slots
	used  uint32   // slots handed out at least once
}

type bigKey struct{ user, task string }

// classOf is the smallest slot class that holds n bytes, or bigClass.
func classOf(n int) int {
	for c, size := range slotSizes {
		if n <= size {
			return c
		}
	}
	return bigClass
}

// put keeps user and task and returns their item for due.
func (k *keys) put(due int64, user, task string) item {
	n := len(user) + len(task)
	it := item{due: due, ulen: uint16(len(user)), tlen: uint16(len(task))}
	c := bigClass
	if len(user) <= 0xffff && len(task) <= 0xffff {
		c = classOf(n)
	}
	if c != bigClass {
		sc := &k.classes[c]
		var slot uint32
		switch {
		case len(sc.free) > 0:
			slot = sc.free[len(sc.free)-1]
			sc.free = sc.free[:len(sc.free)-1]
		case sc.used < maxSlots:
			slot = sc.used
			sc.used++
			if per := uint32(slabBytes / slotSizes[c]); slot/per >= uint32(len(sc.slabs)) {
				sc.slabs = append(sc.slabs, make([]byte, int(per)*slotSizes[c]))
			}
		default:
			c = bigClass // this class is full: keep the ids as strings
		}
		if c != bigClass {
			b := k.slot(c, slot)
			copy(b[copy(b, user):], task)
			it.ref = uint32(c)<<slotBits | slot
			return it
		}
	}
	var slot uint32
	if len(k.bigFree) > 0 {
		slot = k.bigFree[len(k.bigFree)-1]
		k.bigFree = k.bigFree[:len(k.bigFree)-1]
		k.big[slot] = bigKey{user, task}
	} else {
		slot = uint32(len(k.big))
		k.big = append(k.big, bigKey{user, task})
	}
	it.ref = bigClass<<slotBits | slot
	return it
}

// slot is the bytes of slot number slot of class c.
func (k *keys) slot(c int, slot uint32) []byte {
	size := slotSizes[c]
	per := uint32(slabBytes / size)
	off := int(slot%per) * size
	return k.classes[c].slabs[slot/per][off : off+size]
}

// ids returns the user and task ids of it as views of the keys: valid until
// it is freed. Callers that keep them past that must copy them.
func (k *keys) ids(it item) (user, task string) {
	c, slot := int(it.ref>>slotBits), it.ref&slotMask
	if c == bigClass {
		b := k.big[slot]
		return b.user, b.task
	}
	b := k.slot(c, slot)
	u, t := int(it.ulen), int(it.tlen)
	return unsafe.String(unsafe.SliceData(b), u), unsafe.String(unsafe.SliceData(b[u:]), t)
}

// free gives the slot of it back.
func (k *keys) free(it item) {
	c, slot := int(it.ref>>slotBits), it.ref&slotMask
	if c == bigClass {
		k.big[slot] = bigKey{}
		k.bigFree = append(k.bigFree, slot)
		return
	}
	k.classes[c].free = append(k.classes[c].free, slot)
}

// pos is the position of it, with ids of its own.
func (k *keys) pos(it item) Pos {
	u, t := k.ids(it)
	return Pos{Due: it.due, User: strings.Clone(u), Task: strings.Clone(t)}
}
