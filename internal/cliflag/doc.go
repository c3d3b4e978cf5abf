// Package cliflag holds the getopt-like argument handling the goroce
// command shares over the standard flag package, so that its commands take
// their arguments as the rdma-core and perftest programs they mirror do:
//
//   - Parse parses a flag.FlagSet's arguments with operands between the
//     flags (ibv_rc_pingpong HOST -n 10), operands only after "--";
//   - SplitShort turns grouped one-letter boolean flags ("-vV") into
//     separate ones, as rping's users type them;
//   - Seconds is a flag.Value for a duration given in seconds ("0.2", as
//     ping takes it) or with a unit ("200ms");
//   - Off is a boolean flag that is on by default (--gso=false);
//   - CC is a flag.Value for a congestion control mode (--cc off|loss|ecn).
package cliflag
