"""The testbed: an Open vSwitch + Mininet fabric with its Ryu controller, brought up and torn down."""
