package redact

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Phones returns a copy of m with every string field named phone, at any
// depth, masked (Phone).
func Phones(m proto.Message) proto.Message {
	c := proto.Clone(m)
	maskPhones(c.ProtoReflect())
	return c
}

func maskPhones(m protoreflect.Message) {
	var phones []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "phone" && fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated:
			phones = append(phones, fd)
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					maskPhones(mv.Message())
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i, l := 0, v.List(); i < l.Len(); i++ {
					maskPhones(l.Get(i).Message())
				}
			}
		case fd.Message() != nil:
			maskPhones(v.Message())
		}
		return true
	})
	for _, fd := range phones { // not while ranging: Range forbids changes
		m.Set(fd, protoreflect.ValueOfString(Phone(m.Get(fd).String())))
	}
}
