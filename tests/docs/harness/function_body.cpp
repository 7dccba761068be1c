// A block that is the body of a function: its #include lines are hoisted to the file's top.
inline void fragment() {
// FRAGMENT
}
