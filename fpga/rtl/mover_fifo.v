// A first-word-fall-through FIFO for the payload the read engine fetched: one write and one
// read a clock, the memory read registered so synthesis maps it to block RAM.
//
// Reset: rst high empties it (synchronous). One clock domain.
`default_nettype none

module mover_fifo #(
    parameter integer WIDTH = 65,
    parameter integer DEPTH_LOG2 = 9
) (
    input  wire                  aclk,
    input  wire                  rst,
    input  wire                  push,
    input  wire [WIDTH-1:0]      din,
    input  wire                  pop,
    output reg  [WIDTH-1:0]      dout,
    output reg                   dout_valid
);
    localparam integer DEPTH = 1 << DEPTH_LOG2;

    reg [WIDTH-1:0] mem [0:DEPTH-1];
    reg [DEPTH_LOG2:0] wptr;
    reg [DEPTH_LOG2:0] rptr;

    wire ram_empty = (wptr == rptr);
    // fill the output register when it is empty or being read
    wire fetch = !ram_empty && (!dout_valid || pop);

    always @(posedge aclk) begin
        if (push) mem[wptr[DEPTH_LOG2-1:0]] <= din;
        if (fetch) dout <= mem[rptr[DEPTH_LOG2-1:0]];
    end

    always @(posedge aclk) begin
        if (rst) begin
            wptr <= 0;
            rptr <= 0;
            dout_valid <= 1'b0;
        end else begin
            if (push) wptr <= wptr + 1'b1;
            if (fetch) rptr <= rptr + 1'b1;
            if (fetch) dout_valid <= 1'b1;
            else if (pop) dout_valid <= 1'b0;
        end
    end
endmodule

`default_nettype wire
