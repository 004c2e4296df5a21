pub mod pair_wire;
