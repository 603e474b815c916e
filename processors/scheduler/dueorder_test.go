package scheduler

import (
	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex/dueindextest"
)

// withDueOrder wraps the table's stores of build in stores that keep the
// due order beside their values (dueindex.Entries), as the local stores do
// in production (localstore.Stores.Index): the harness's scheduler runs
// with a due index that holds a window of it, as in production.
func withDueOrder(build storage.Builder, table string) storage.Builder {
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := build(topic, part)
		if err != nil || topic != table {
			return st, err
		}
		return dueindextest.New(st, dueindex.EntriesVersion, dueindex.Entries(ParseValue)), nil
	}
}
