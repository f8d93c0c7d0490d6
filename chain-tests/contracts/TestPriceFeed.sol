// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// A minimal Chainlink-style price feed (AggregatorV3Interface's reads) for the circuit
/// breaker's tests: the deployer sets the answer and when it was last updated.
contract TestPriceFeed {
    uint8 public immutable decimals;
    address private immutable owner;
    uint80 private round;
    int256 private answer;
    uint256 private updatedAt;

    constructor(uint8 decimals_, int256 answer_) {
        decimals = decimals_;
        owner = msg.sender;
        set(answer_, block.timestamp);
    }

    /// A new round: `answer_` (USD per whole coin, with `decimals` places), updated at
    /// `updatedAt_` (Unix seconds).
    function set(int256 answer_, uint256 updatedAt_) public {
        require(msg.sender == owner, "not the owner");
        round += 1;
        answer = answer_;
        updatedAt = updatedAt_;
    }

    function latestRoundData() external view returns (uint80, int256, uint256, uint256, uint80) {
        return (round, answer, updatedAt, updatedAt, round);
    }
}
