package host

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAddressAccepts(t *testing.T) {
	cases := []struct {
		in   string
		want Address
	}{
		{"0000:3b:00.0", "0000:3b:00.0"},
		{"3b:00.0", "0000:3b:00.0"},
		{"0000:3B:00.0", "0000:3b:00.0"},
		{"0009:01:00.0", "0009:01:00.0"},
		{"FFFF:FF:1F.7", "ffff:ff:1f.7"},
		{"ab:1f.7", "0000:ab:1f.7"},
		{" 0000:af:00.1\n", "0000:af:00.1"},
		{"10000:e1:00.0", "10000:e1:00.0"},    // Intel VMD domain
		{"00010000:e1:00.0", "10000:e1:00.0"}, // zero-padded VMD domain
		{"ffffffff:00:00.0", "ffffffff:00:00.0"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseAddress(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			again, err := ParseAddress(string(got))
			require.NoError(t, err)
			assert.Equal(t, got, again, "canonical form must be a fixed point")
		})
	}
}

func TestParseAddressRejects(t *testing.T) {
	cases := []struct {
		name, in string
	}{
		{"empty", ""},
		{"blank", "   "},
		{"path traversal", "../../x"},
		{"trailing path", "0000:3b:00.0/.."},
		{"leading path", "../0000:3b:00.0"},
		{"slash in function", "0000:3b:00./"},
		{"device out of range", "0000:3b:20.0"},
		{"device max hex", "0000:3b:ff.0"},
		{"function 8", "0000:3b:00.8"},
		{"function two digits", "0000:3b:00.00"},
		{"missing function", "0000:3b:00"},
		{"missing dot", "0000:3b:000"},
		{"two dots", "0000:3b:00.0.0"},
		{"short domain", "000:3b:00.0"},
		{"long domain", "000000000:3b:00.0"},
		{"short bus", "0000:3:00.0"},
		{"long bus", "0000:3bb:00.0"},
		{"short device", "0000:3b:0.0"},
		{"non-hex bus", "0000:3g:00.0"},
		{"sign", "0000:+3:00.0"},
		{"too many colons", "0000:00:3b:00.0"},
		{"no colon", "3b00.0"},
		{"only dots", "..:..:..."},
		{"nul", "0000:3b:00.0\x00"},
		{"inner space", "0000:3b: 0.0"},
		{"BDF with driver", "0000:3b:00.0 nvidia"},
		{"unicode digit", "0000:3b:0٣.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAddress(c.in)
			require.Error(t, err)
			assert.Empty(t, got)
			assert.Contains(t, err.Error(), "invalid PCI address")
		})
	}
}

func TestAddressSlot(t *testing.T) {
	assert.Equal(t, "0000:01:00", Address("0000:01:00.3").Slot())
	assert.Equal(t, "10000:e1:00", Address("10000:e1:00.0").Slot())
	f := &Function{Address: "0000:01:00.1"}
	assert.Equal(t, "0000:01:00", f.Card())
	assert.Equal(t, "0000:01:00.1", f.Address.String())
}

func TestParseID(t *testing.T) {
	good := []struct {
		in   string
		want uint16
	}{
		{"10de", 0x10de},
		{"0x10de", 0x10de},
		{"0x10DE\n", 0x10de},
		{"0X15B3", 0x15b3},
		{"0x0", 0},
		{"ffff", 0xffff},
		{"2", 2},
	}
	for _, c := range good {
		got, err := ParseID(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	for _, in := range []string{"", "0x", "0x10de0", "10000", "g10d", "-1", "+10", "0x0x10", "0x0X10", "10 de", "0x\n"} {
		_, err := ParseID(in)
		assert.Error(t, err, "%q must be rejected", in)
	}
}

func TestParseClass(t *testing.T) {
	good := []struct {
		in   string
		want uint32
	}{
		{"0x030200", 0x030200},
		{"0x030000\n", 0x030000},
		{"040300", 0x040300},
		{"0X0C0330", 0x0c0330},
		{"0x0680", 0x0680},
	}
	for _, c := range good {
		got, err := ParseClass(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	for _, in := range []string{"", "0x", "0x0302000", "VGA", "0x03:02", "0x0x0302", "-0x0302"} {
		_, err := ParseClass(in)
		assert.Error(t, err, "%q must be rejected", in)
	}
}

func TestRoleOf(t *testing.T) {
	cases := []struct {
		vendor uint16
		class  uint32
		want   Role
	}{
		{VendorNVIDIA, 0x030200, RoleGPU},
		{VendorNVIDIA, 0x030000, RoleGPU},
		{VendorNVIDIA, 0x030201, RoleGPU},
		{VendorNVIDIA, 0x040300, RoleAudio},
		{0x8086, 0x040300, RoleAudio},
		{VendorNVIDIA, 0x0c0330, RoleUSB},
		{VendorNVIDIA, 0x0c8000, RoleSerial},
		{VendorNVIDIA, 0x068000, RoleNVSwitch},
		{0x8086, 0x068000, RoleOther}, // a bridge/other that is not NVIDIA's
		{0x15b3, 0x020700, RoleOther},
		{0x15b3, 0x020000, RoleOther},
		{0x8086, 0x060400, RoleOther},
		{0x10de, 0x040100, RoleOther}, // audio class, not HD audio
	}
	for _, c := range cases {
		assert.Equal(t, c.want, RoleOf(c.vendor, c.class), "%04x class %06x", c.vendor, c.class)
	}
}

func TestIsPCIBridgeAndVFIODriver(t *testing.T) {
	assert.True(t, IsPCIBridge(0x060400))
	assert.True(t, IsPCIBridge(0x060401))
	assert.False(t, IsPCIBridge(0x068000))
	assert.False(t, IsPCIBridge(0x030200))

	assert.True(t, IsVFIODriver("vfio-pci"))
	assert.True(t, IsVFIODriver("nvgrace_gpu_vfio_pci"))
	assert.False(t, IsVFIODriver("nvidia"))
	assert.False(t, IsVFIODriver(""))
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"nvidia", "vfio-pci", "6.1.0-sim-amd64"} {
		assert.True(t, validName(s), s)
	}
	for _, s := range []string{"", ".", "..", "a/b", "../x", "a\x00", "a\nb"} {
		assert.False(t, validName(s), "%q", s)
	}
}
