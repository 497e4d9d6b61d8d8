package operands

import "k8s.io/apimachinery/pkg/util/intstr"

func intstrFrom(port int32) intstr.IntOrString { return intstr.FromInt32(port) }
