package kafkatest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// listener is an extra listener of the broker (WithListener).
type listener struct{ name, protocol string }

// WithListener adds a listener named name (upper case, like "SASL_SSL")
// that speaks protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL) on a
// free port of 127.0.0.1, next to the PLAINTEXT listener that Addr returns
// (which the controller, kafkatest's readiness probe and other tests keep
// using). Broker.ListenerAddr(name) returns its address. Set its security
// settings with WithProperty, per listener as Kafka reads them:
// "listener.name.<name in lower case>.<setting>", for example
// listener.name.sasl_ssl.sasl.enabled.mechanisms.
func WithListener(name, protocol string) Option {
	return func(c *config) { c.listeners = append(c.listeners, listener{name, protocol}) }
}

// WithFormatArgs appends arguments to the storage format command that
// Start runs before the first start (kafka-storage format), for example
// SCRAM users:
//
//	WithFormatArgs("--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]")
func WithFormatArgs(args ...string) Option {
	return func(c *config) { c.formatArgs = append(c.formatArgs, args...) }
}

// ListenerAddr returns the host:port of the listener added with
// WithListener, or "" if there is none of that name.
func (b *Broker) ListenerAddr(name string) string { return b.listeners[name] }

// addListeners gives each extra listener a free port and adds it to the
// listener properties.
func (b *Broker) addListeners(props map[string]string, listeners []listener) error {
	if len(listeners) == 0 {
		return nil
	}
	ports, err := freePorts(len(listeners))
	if err != nil {
		return err
	}
	b.listeners = map[string]string{}
	for i, l := range listeners {
		if l.name == "" || strings.ToUpper(l.name) != l.name || b.listeners[l.name] != "" ||
			!slices.Contains([]string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}, l.protocol) || l.name == "PLAINTEXT" || l.name == "CONTROLLER" {
			return fmt.Errorf("kafkatest: listener %q speaking %q: want a new upper-case name and PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", l.name, l.protocol)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
		b.listeners[l.name] = addr
		for key, v := range map[string]string{
			"listeners":                      l.name + "://" + addr,
			"advertised.listeners":           l.name + "://" + addr,
			"listener.security.protocol.map": l.name + ":" + l.protocol,
		} {
			props[key] += "," + v
		}
	}
	return nil
}
