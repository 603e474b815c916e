// Package kafkaclient is ivrsched's Kafka-client layer: the client
// configuration every component shares (Kafka: Sarama's configuration,
// the builders of Goka's producers, consumer groups, consumers and topic
// managers, Connect), TLS and SASL to the brokers (security.go), the
// commits of every input in order (heldcommits.go, heldcommits_order.go),
// the order of each key's writes (keyorder.go), the rejoin of a consumer
// group (rejoin.go), partition consumers started during the restore
// (early_claims.go), emitters rebuilt after Sarama's circuit breaker opened
// (reviving_emitter.go) and a processor's consumer group membership
// (membership.go). It imports nothing of ivrsched's but codec: the caller
// gives it the partitioner's hash (Kafka.Hasher, topology.Murmur2), and
// package topology creates the topics with it.
//
// It is also the home of what ivrsched relies on in Goka (v1.1.16) and
// Sarama (v1.46.3): each behaviour below is pinned by a test of this
// package, named for it, against the real libraries on an in-process
// broker (kfake) with ivrsched's client configuration (Kafka), so that an
// upgrade that changes one fails that test.
//
// Marks and commits:
//   - Goka marks an input record (MarkOffset with its offset + 1, on the
//     session its Setup got) once the callback returned and every emit and
//     table write of that record was acknowledged; a later record that
//     wrote nothing is marked before an earlier one whose writes are in
//     flight (TestGokaMarksARecordOnceItsOwnEmitsAreAcknowledged).
//   - Sarama commits the highest offset marked in a session; a lower mark
//     changes nothing (TestSaramaCommitsTheHighestMark). With the above,
//     this is why every input is committed in order (heldcommits.go,
//     processors/dialer/placement/commits.go).
//   - When a session ends, Goka's Cleanup waits for the callbacks whose
//     writes are in flight and marks them before it returns, before
//     Sarama's last commit of the session (TestCleanupWaitsForInFlightEmits).
//
// Acknowledgements:
//   - While the broker takes every request, a partition's records are
//     written and acknowledged in the order they were emitted
//     (TestAcknowledgementsOfAPartitionComeInEmitOrder). Goka reads
//     successes and errors on two goroutines: between a success and an
//     error there is no order.
//   - Not so across a retriable refusal, although Kafka.Sarama allows one
//     request in flight per broker: Sarama's broker producer may hand on its
//     next batch before it handles the previous answer (one select offers
//     both), and its broker writes that request to the connection while the
//     one before is unanswered. When the broker refuses the first once
//     (NOT_LEADER_FOR_PARTITION) and takes the next, the refused records are
//     written after the next ones, on their retry. So the rule ivrsched relies
//     on is its own: the writes of one key reach their topic in the order they
//     were emitted, for the producers Kafka builds (keyorder.go) send a write
//     only once its key's write before it is acknowledged; a write that fails
//     fails those held behind it, and in a processor's producer every later
//     write of its key (the partition fails and replays), so a topic never has
//     a later value of a key after a failed earlier one. Else a value written
//     before a Forget's tombstone could land after it, and the erased user
//     come back on restore. The emitters built with one Kafka.EmitterOptions
//     keep the order together, so a reviving emitter's new producer
//     (reviving_emitter.go) waits for the old one's write of a key; an emitter
//     writes a key again once its failed writes are answered.
//     TestWritesOfAKeyStayInOrderAcrossARetriableRefusal holds the refused
//     request until the next one comes (with Sarama's producer alone it fails
//     every run); TestWritesOfAKeyBehindAFailedOneFail;
//     TestEmittersOfOneOptionsKeepAKeysOrderBetweenThem. Rejected: Sarama's
//     idempotent producer keeps the order but lost acknowledged records
//     (docs/design.md), so Kafka's producers are not idempotent
//     (TestProducerIsNotIdempotent); Retry.Max = 0 fails the partition at
//     every leader move, and the next request is written before the failed
//     one is replayed.
//   - Sarama's producer keeps a circuit breaker per topic (and per
//     partition) for its lookups: three failures in a row open it, and an
//     open breaker refuses every record at once for 10 s, even once the
//     brokers answer again (TestProducerBreakerOpensAfterThreeFailedLookups;
//     reviving_emitter.go builds a new producer then).
//   - A broker closes a connection idle for connections.max.idle.ms (10
//     minutes by default); Sarama's producer learns it when its next
//     request there fails, and retries the batch on a new connection after
//     Retry.BackoffFunc's wait, which is none for a first retry
//     (TestProducerRetriesOnAClosedConnectionAtOnce; on Apache Kafka,
//     systemtest's TestFirstFireAfterAnIdleStretch; issue 32).
//
// Fetches:
//   - A Sarama consumer sends one fetch per broker for all the partitions
//     it consumes there; with Fetch.Min 1 the broker answers it as soon as
//     a record arrives on any of them, not at the end of MaxWaitTime, so
//     Kafka.FetchWait (500 ms) costs no latency, and an idle consumer
//     fetches about once per FetchWait
//     (TestFetchReturnsWhenAnyPartitionHasARecord; issue 32).
//
// Restore:
//   - Goka calls MarkRecovered once a partition's restore reached the
//     high-water mark it read when it began, after Set and SetOffset of
//     every restored record (TestMarkRecoveredWhenRestoreReachesHighWaterMark).
//   - Goka also calls MarkRecovered when the restore's context ends before
//     that mark (a revoke, a stop): its partition table returns nil and
//     calls MarkRecovered on a goroutine nothing waits for, which may run
//     after Close. MarkRecovered alone does not say the store is complete
//     (TestMarkRecoveredWhenRestoreIsCutOff; issue 30, defect 3).
//   - A session's partitions are restored inside Goka's Setup of that
//     session: MarkRecovered comes before Setup returns
//     (TestMarkRecoveredRunsInsideSetup; processors/dialer/placement/keeper.go
//     relies on it, early_claims.go starts the claims meanwhile).
//   - After MarkRecovered, SetOffset comes with the acknowledgement of each
//     of the processor's own table writes (from the producer's goroutine,
//     concurrently with Set), with the write's changelog offset, and not
//     at all for a write at offset 0
//     (TestSetOffsetAfterRecoveryComesWithAcknowledgedWritesButOffsetZero;
//     internal/localstore ignores it then).
//
// Storage:
//   - Goka's memory storage (storage.NewMemory) sorts all its keys at each
//     Set of a new key, so a restore into it takes time quadratic in the
//     records (TestGokaMemoryStorageSetCostGrowsWithItsKeys), and keeps the
//     slice Set is given, a slice of the fetch response in a view
//     (TestGokaMemoryStorageKeepsTheSliceItIsGiven). It holds views of a few
//     keys (the calling policy, ReadView's callers); the do-not-call list
//     has a storage of its own (internal/suppress; issue 33).
//   - goleveldb (Goka's LevelDB, v1.0.1-0.20220721030215-126854af5e6d),
//     with its block cache off, keeps each open table's index and bloom
//     filter in memory, so a read of a key below the memtable reads one
//     data block from the file (TestReadPastTheMemtableReadsOneBlock, the
//     one pin outside this package: it is in internal/localstore, whose
//     options it needs). A fire's read of a pending user's value costs
//     one block read because of it.
//
// Rebalances:
//   - Goka closes every partition's store when a group session ends (a
//     rebalance) and builds and opens the store of each partition of the
//     next session, also of those that stayed with this instance
//     (TestGokaClosesAndReopensStoresAtEachRebalance;
//     processors/scheduler/dueindex/kept.go keeps a closed partition's due
//     index for its next open because of it).
//   - Goka waits a fixed 5 s before it joins its group again after a
//     session ended, and the group's next rebalance waits for it
//     (TestGokaWaitsFiveSecondsBeforeItJoinsAgain; rejoin.go joins at once
//     instead, and keeps a pause only after a failed partition).
package kafkaclient
