package devinfo

import "testing"

func TestGUIDString(t *testing.T) {
	if got := GUIDString(0x505400fffe990002); got != "5054:00ff:fe99:0002" {
		t.Errorf("GUIDString = %s", got)
	}
}
