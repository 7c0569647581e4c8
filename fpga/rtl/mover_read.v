// The read engine: an AXI4 read master that fetches each accepted descriptor's payload, in
// descriptor order, as 64-bit INCR bursts of at most MAX_BURST beats that never cross a 4 KiB
// boundary (the AXI rule), into the payload FIFO. It issues a burst only when the FIFO has
// room for all of it (`in_flight` counts words requested and not yet taken by the
// transmitter), so RREADY stays high and the FIFO never overflows. Each word carries RRESP's
// error bit to the transmitter.
//
// Reset: rst high drops the current descriptor's progress (synchronous); AXI requires that
// no transaction is outstanding across a reset. One clock domain.
`default_nettype none

module mover_read #(
    parameter integer ADDR_W = 32,
    parameter integer FIFO_LOG2 = 9,
    parameter integer MAX_BURST = 16
) (
    input  wire                 aclk,
    input  wire                 rst,
    // descriptor fields
    input  wire                 rd_valid,
    input  wire [ADDR_W-1:0]    rd_addr,
    input  wire [12:0]          rd_len,
    output reg                  rd_pop,
    // AXI4 read address channel
    output reg  [ADDR_W-1:0]    m_axi_araddr,
    output reg  [7:0]           m_axi_arlen,
    output wire [2:0]           m_axi_arsize,
    output wire [1:0]           m_axi_arburst,
    output wire [3:0]           m_axi_arcache,
    output wire [2:0]           m_axi_arprot,
    output reg                  m_axi_arvalid,
    input  wire                 m_axi_arready,
    // AXI4 read data channel
    input  wire [63:0]          m_axi_rdata,
    input  wire [1:0]           m_axi_rresp,
    input  wire                 m_axi_rvalid,
    output wire                 m_axi_rready,
    // to the payload FIFO: {read error, data}
    output wire                 fifo_push,
    output wire [64:0]          fifo_din,
    input  wire                 fifo_pop
);
    localparam integer DEPTH = 1 << FIFO_LOG2;

    assign m_axi_arsize = 3'd3;    // 8 bytes a beat
    assign m_axi_arburst = 2'b01;  // INCR
    assign m_axi_arcache = 4'b0011; // normal, non-cacheable, bufferable
    assign m_axi_arprot = 3'b000;
    assign m_axi_rready = 1'b1;
    assign fifo_push = m_axi_rvalid;
    assign fifo_din = {m_axi_rresp[1], m_axi_rdata};

    reg [FIFO_LOG2:0] in_flight;   // words requested and not yet popped by the transmitter
    reg               busy;
    reg [ADDR_W-1:0]  next_addr;   // 8-byte aligned
    reg [10:0]        words_left;  // of this descriptor, at most 513

    // the next burst: up to MAX_BURST beats, to the 4 KiB boundary, to the payload's end
    wire [9:0]  to_boundary = 10'd512 - {1'b0, next_addr[11:3]};
    wire [10:0] cap = ({22'd0, to_boundary} < MAX_BURST) ? {1'b0, to_boundary} : MAX_BURST[10:0];
    wire [10:0] beats = (words_left < cap) ? words_left : cap;
    // widths: FIFO_LOG2 is at least 9 (a 4 KiB payload is 513 words)
    wire [31:0] after = {{(31-FIFO_LOG2){1'b0}}, in_flight} + {21'd0, beats};
    wire room = after <= DEPTH;

    // words of a descriptor: from the 8-byte word holding its first byte to the one holding
    // its last; none for an empty payload
    wire [13:0] span = {11'd0, rd_addr[2:0]} + {1'b0, rd_len} + 14'd7;
    wire [10:0] rd_words = (rd_len == 13'd0) ? 11'd0 : span[13:3];

    wire ar_done = m_axi_arvalid && m_axi_arready;
    // RRESP bit 0 tells EXOKAY from OKAY and SLVERR from DECERR: bit 1 is the error
    // verilator lint_off UNUSEDSIGNAL
    wire unused = &{1'b0, m_axi_rresp[0], span[2:0]};
    // verilator lint_on UNUSEDSIGNAL
    wire [FIFO_LOG2:0] burst_words = {{(FIFO_LOG2-8){1'b0}}, m_axi_arlen} + 1'b1;
    wire [FIFO_LOG2:0] requested = ar_done ? burst_words : {(FIFO_LOG2+1){1'b0}};

    always @(posedge aclk) begin
        if (rst) begin
            in_flight <= 0;
            busy <= 1'b0;
            next_addr <= {ADDR_W{1'b0}};
            words_left <= 11'd0;
            m_axi_arvalid <= 1'b0;
            m_axi_araddr <= {ADDR_W{1'b0}};
            m_axi_arlen <= 8'd0;
            rd_pop <= 1'b0;
        end else begin
            rd_pop <= 1'b0;
            in_flight <= in_flight + requested - {{FIFO_LOG2{1'b0}}, fifo_pop};
            if (ar_done) m_axi_arvalid <= 1'b0;
            if (!busy) begin
                if (rd_valid && !rd_pop) begin
                    busy <= 1'b1;
                    next_addr <= {rd_addr[ADDR_W-1:3], 3'b000};
                    words_left <= rd_words;
                end
            end else if (!m_axi_arvalid || ar_done) begin
                if (words_left == 11'd0) begin
                    busy <= 1'b0;
                    rd_pop <= 1'b1;
                end else if (!ar_done && room) begin
                    m_axi_araddr <= next_addr;
                    m_axi_arlen <= beats[7:0] - 8'd1;
                    m_axi_arvalid <= 1'b1;
                    next_addr <= next_addr + {{(ADDR_W-14){1'b0}}, beats, 3'b000};
                    words_left <= words_left - beats;
                end
            end
        end
    end
endmodule

`default_nettype wire
