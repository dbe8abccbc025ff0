//go:build race

package publisher

// raceEnabled: the race detector slows the simulation tenfold, for nothing (it runs on one
// goroutine); TestSimulation then runs fewer seeds unless -sim.seeds says how many.
const raceEnabled = true
