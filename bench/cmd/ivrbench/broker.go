package main

// brokerProfile is how the benchmark configures the Apache Kafka broker it
// starts, on top of internal/kafkatest's test defaults (-Xms64m -Xmx512m
// -XX:+UseSerialGC, 1 MiB log segments, 2 network and 2 I/O threads).
type brokerProfile struct {
	jvm   []string          // JVM flags after kafkatest's, which they override
	props map[string]string // server.properties entries
}

var brokerProfiles = map[string]brokerProfile{
	// test: the test suite's broker, as every run before the floor used.
	"test": {},
	// production: what Kafka's own start scripts give a broker
	// (kafka-server-start.sh: a fixed 1 GiB heap; kafka-run-class.sh: G1
	// with 20 ms pause goals), and Kafka's default log segment of 1 GiB
	// instead of the tests' 1 MiB, which rolled a segment (new files, an
	// index preallocated and mapped, the old one flushed to disk) every
	// few thousand records. Two network and two I/O threads stay: the
	// machine has two cores.
	"production": {
		jvm: []string{"-Xms1g", "-Xmx1g", "-XX:-UseSerialGC", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent"},
		props: map[string]string{"log.segment.bytes": "1073741824"},
	},
}
