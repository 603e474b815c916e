// Package localstore keeps Goka group tables in local LevelDB databases that
// survive a kill -9 without a full restore: a store writes to LevelDB only
// what the table's changelog holds, with the offset it reached, so that
// after a crash Goka restores only the changelog's tail.
//
// Each file holds one mechanism and opens with a comment on it:
//
//   - store.go: the stores, one LevelDB per table partition, and their
//     open (directory lock, wipe of an untrusted store) and close;
//   - overlay.go: callbacks' writes held in memory until the changelog
//     acknowledges them (Stores.Producer), and the read path;
//   - restore.go: Goka's restore, batched, and its end (MarkRecovered);
//   - offset.go: the changelog offset and caught-up stamp in LevelDB;
//   - end.go: the changelog's end read at open, which a restore must reach;
//   - changelog.go: a store's own read of its changelog, before Goka's;
//   - keys.go, keyfilter.go: the Bloom filter of the keys a store may hold;
//   - recent.go: the values read or written last;
//   - marks.go: an index of the keys whose value a Marker accepts;
//   - iterator.go: iteration over LevelDB merged with the overlay.
package localstore
